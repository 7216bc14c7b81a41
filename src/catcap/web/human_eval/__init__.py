"""``catcap human-eval``: the paper's pairwise human study (Table 8): create, serve, export."""
