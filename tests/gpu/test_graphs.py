"""Static decoding and CUDA graphs on a GPU: for every decoder x cross-attention variant of the
contract, the captions of a replayed CUDA graph are those of eager decoding on the same card
(greedy, beam, diverse beam; seeded sampling runs eagerly and must say so), a second batch of
the same shape replays the same graph, and the static loop's captions equal the default loop's.

Skipped where there is no CUDA device. TF32 off, as in test_cuda.py."""

import pytest
import torch

from catcap.decoding import GenerationConfig, generate
from catcap.decoding.graphs import GRAPHS
from catcap.decoding.processors import build_processors
from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS, contract_batch, ending_captioner

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: these tests check CUDA graphs (run them where torch.cuda.is_available())",
                allow_module_level=True)

CUDA, EOS = torch.device("cuda"), 2
CONFIGS = {
    "greedy": GenerationConfig(num_beams=1, max_length=7),
    "beam": GenerationConfig(num_beams=3, max_length=7, length_penalty=1.0, num_return_sequences=2),
    "diverse_beam": GenerationConfig(num_beams=4, num_beam_groups=2, diversity_penalty=0.5, max_length=7),
}
FIELDS = ("tokens", "log_probs", "lengths", "mask", "scores")


def cuda_model(variant):
    return ending_captioner(variant, EOS).to(CUDA)


def batches():
    features, fmask, _, _ = contract_batch()
    other = torch.randn(features.shape, generator=torch.Generator().manual_seed(7))
    return (features.to(CUDA), fmask.to(CUDA)), (other.to(CUDA), fmask.to(CUDA))


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("variant", CONTRACT_VARIANTS, ids=CONTRACT_IDS)
def test_graph_replays_give_eager_captions(variant, name):
    model, rules = cuda_model(variant), build_processors(EOS, suppress_ids=[0, 1], no_repeat_ngram=2)
    config = CONFIGS[name]
    GRAPHS.clear()
    with torch.no_grad():
        for features, fmask in batches():  # the second batch replays the first one's graph
            graphed = generate(model, features, fmask, config, processors=rules)
            eager = generate(model, features, fmask, config, processors=rules, cuda_graphs=False)
            default = generate(model, features, fmask, config, processors=rules, static=False)
            for field in FIELDS:
                assert torch.equal(getattr(graphed, field), getattr(eager, field)), field
            assert torch.equal(eager.tokens, default.tokens)
    assert not GRAPHS.refused, GRAPHS.refused
    assert GRAPHS.captures >= 1 and len(GRAPHS.graphs) == 1


def test_sampling_from_the_global_generator_is_captured_and_draws_anew():
    model, (features, fmask) = cuda_model(("transformer", "caca", {})), batches()[0]
    config = GenerationConfig(do_sample=True, num_return_sequences=5, max_length=7)
    GRAPHS.clear()
    with torch.no_grad():
        first = generate(model, features, fmask, config)
        second = generate(model, features, fmask, config)
    assert len(GRAPHS.graphs) == 1 and not GRAPHS.refused
    assert not torch.equal(first.tokens, second.tokens)  # each replay draws new numbers
    assert bool((first.tokens[:, 0] != 0).all())  # every caption has a first word


def test_seeded_sampling_runs_eagerly_with_its_seed():
    model, (features, fmask) = cuda_model(("transformer", "caca", {})), batches()[0]
    config = GenerationConfig(do_sample=True, num_return_sequences=3, seed=5, max_length=7)
    GRAPHS.clear()
    with torch.no_grad():
        a, b = generate(model, features, fmask, config), generate(model, features, fmask, config, static=False)
    assert torch.equal(a.tokens, b.tokens) and not GRAPHS.graphs
