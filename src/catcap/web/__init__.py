"""catcap's web faces: the demo server, the side-by-side report and the pairwise human evaluation."""
