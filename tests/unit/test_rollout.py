"""Rollout sampler: padding invariance, stopping, determinism, shared prompts, fast engine vs HF (tool mode:
test_rollout_tool.py; the scoring forwards and the sampler's log-probs: test_logprobs.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from dsmath.generation.engines import FastLlama, HFDecoder, fast_path_unsupported, position_ids
from dsmath.generation.logprobs import sequence_logprobs
from dsmath.generation.rollout import left_pad, sample
from dsmath.generation.sampling import RowNoise, _nucleus, sample_next
from tests.unit.tiny_lm import EOS, PAD, greedy, prompts_of, tiny_llama
from tests.unit.tiny_lm import gpt2 as gpt2  # noqa: F401  (module fixture)
from tests.unit.tiny_lm import model as model  # noqa: F401  (module fixture)

ENGINES = ["fast", "hf"]



# ----------------------------------------------------------------------------------------------------------------
# padding, positions


def test_left_pad_and_position_ids():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_token_id=0)
    torch.testing.assert_close(ids, torch.tensor([[5, 6, 7], [0, 0, 8]]))
    torch.testing.assert_close(mask, torch.tensor([[1, 1, 1], [0, 0, 1]]))
    # real tokens count 0, 1, 2 ...; pads get 0
    torch.testing.assert_close(position_ids(mask), torch.tensor([[0, 1, 2], [0, 0, 0]]))
    with pytest.raises(ValueError, match="at least one token"):
        left_pad([[1], []], 0)


@pytest.mark.parametrize(("arch", "engine"), [("llama", "fast"), ("llama", "hf"), ("gpt2", "auto")])
def test_left_padding_invariance(request, arch, engine):
    """A prompt alone and the same prompt padded next to a longer one continue identically."""
    model = request.getfixturevalue({"llama": "model", "gpt2": "gpt2"}[arch])
    short, long = prompts_of([4, 15])
    alone = greedy(model, [short], engine)
    batch = greedy(model, [long, short], engine)
    torch.testing.assert_close(batch.completion_ids[1], alone.completion_ids[0], rtol=0, atol=0)
    torch.testing.assert_close(batch.logprobs[1], alone.logprobs[0], rtol=0, atol=1e-5)
    assert batch.prompt_mask[1].tolist() == [0] * 11 + [1] * 4


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_agree(model, engine):
    ref = greedy(model, prompts_of([3, 9, 6]), "hf")
    got = greedy(model, prompts_of([3, 9, 6]), engine)
    torch.testing.assert_close(got.completion_ids, ref.completion_ids, rtol=0, atol=0)
    torch.testing.assert_close(got.logprobs, ref.logprobs, rtol=0, atol=1e-5)


def manual_greedy(model, prompt: list[int], n: int, eos: int | None = None) -> tuple[list[int], list[float]]:
    """Reference greedy decoding: a full uncached forward pass over the unpadded sequence per new token, argmax of
    the last position, its log-softmax; stops after `eos`."""
    ids, lps = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            token = int(logits.argmax())
            ids.append(token)
            lps.append(float(torch.log_softmax(logits.double(), -1)[token]))
            if token == eos:
                break
    return ids[len(prompt):], lps


@pytest.mark.parametrize(("arch", "engine"), [("llama", "fast"), ("llama", "hf"), ("gpt2", "auto")])
def test_greedy_equals_manual_argmax_loop(request, arch, engine):
    """Greedy rollouts of a padded batch are token for token the argmax loop over plain forward passes (engines
    agreeing with each other is not enough: a shared mistake would pass), log-probs those of the chosen tokens."""
    model = request.getfixturevalue({"llama": "model", "gpt2": "gpt2"}[arch])
    prompts = prompts_of([3, 9, 6], seed=2)
    refs = [manual_greedy(model, p, 10) for p in prompts]
    free = refs[1][0]
    j = next(j for j in range(2, len(free)) if free[j] not in free[:j])  # row 1 stops at its (j+1)-th token ...
    eos = free[j]  # ... and every row at its first occurrence of that token
    refs = [manual_greedy(model, p, 10, eos) for p in prompts]
    r = greedy(model, prompts, engine, n=10, eos=eos)
    for i, (tokens, lps) in enumerate(refs):
        n = len(tokens)
        assert r.completion_ids[i, :n].tolist() == tokens
        assert int(r.completion_mask[i].sum()) == n and bool(r.finished[i]) == (tokens[-1] == eos)
        torch.testing.assert_close(r.logprobs[i, :n].double(), torch.tensor(lps, dtype=torch.float64), rtol=0,
                                   atol=1e-4)
    assert r.finished[1] and len(refs[1][0]) == j + 1
    assert len({tuple(t) for t, _ in refs}) == 3  # the prompts lead to different continuations


# ----------------------------------------------------------------------------------------------------------------
# stopping and masks


@pytest.mark.parametrize("engine", ENGINES)
def test_eos_stops_and_masks(model, engine):
    prompts = prompts_of([5, 8, 3])
    free = greedy(model, prompts, engine)  # no EOS: every row runs the full 12 tokens
    eos = int(free.completion_ids[0, 3])  # make row 0's 4th token the EOS
    r = greedy(model, prompts, engine, eos=eos)
    for i in range(3):
        hits = (free.completion_ids[i] == eos).nonzero().flatten().tolist()
        n = hits[0] + 1 if hits else 12  # up to and including the first EOS
        assert r.completion_mask[i].tolist() == [1] * n + [0] * (r.completion_ids.shape[1] - n)
        assert r.completion_ids[i, :n].tolist() == free.completion_ids[i, :n].tolist()
        assert set(r.completion_ids[i, n:].tolist()) <= {PAD}
        assert bool(r.finished[i]) == bool(hits)
        assert (r.logprobs[i, n:] == 0).all()
    assert int(r.completion_mask[0].sum()) <= 4
    torch.testing.assert_close(r.loss_mask, r.completion_mask)  # no tool tokens
    assert r.tool_calls.tolist() == [0, 0, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_max_new_tokens_respected(model, engine):
    r = sample(model, prompts_of([4, 7]), max_new_tokens=5, eos_token_id=[], pad_token_id=PAD,
               seed=0, engine=engine)
    assert r.completion_ids.shape == (2, 5)
    assert r.completion_mask.sum().item() == 10 and not r.finished.any()
    assert not any(t.is_inference() for t in vars(r).values())  # usable in the training graph (as constants)


def test_all_rows_finish_early_trims_width(model):
    prompts = prompts_of([5, 6])
    free = greedy(model, prompts, "fast", n=4)
    # both rows' first tokens are EOS: the rollout is one token wide
    r = greedy(model, prompts, "fast", n=20, eos=free.completion_ids[:, 0].tolist())
    assert r.completion_ids.shape == (2, 1) and r.finished.all()


@pytest.mark.parametrize("engine", ENGINES)
def test_compaction_does_not_change_results(model, engine):
    """Dropping finished rows from the batch (every step vs never) changes nothing for the rows still running."""
    prompts = prompts_of([5, 8, 3, 6, 4])
    eos = greedy(model, prompts, engine).completion_ids[:, 2].tolist()[:3]  # several rows stop early
    always = greedy(model, prompts, engine, eos=eos, compact_frac=0.0)
    never = greedy(model, prompts, engine, eos=eos, compact_frac=1.0)
    assert always.finished.any() and not always.finished.all()
    torch.testing.assert_close(always.completion_ids, never.completion_ids, rtol=0, atol=0)
    torch.testing.assert_close(always.logprobs, never.logprobs, rtol=0, atol=1e-5)


def test_fast_engine_keep_compacts_the_cache_in_place(model):
    """keep(rows) moves each kept row's filled cache slots, bias and position to the front of the same buffer,
    bitwise, and the per-layer views read the compacted rows; rows out of order are refused."""
    prompts = prompts_of([5, 8, 3, 6, 4, 7])
    ids, mask = left_pad(prompts, PAD, model.device)
    dec = FastLlama(model, len(prompts), ids.shape[1] + 4)
    with torch.no_grad():
        logits = dec.prefill(ids, mask)
        for _ in range(2):
            logits = dec.step(logits.argmax(-1))
    t, rows = dec.length, torch.tensor([1, 2, 4, 5])
    before = dec.cache[:, :, rows, :, :t].clone(), dec.bias[rows].clone(), dec.pos[rows].clone()
    buffer = dec.cache.data_ptr()
    dec.keep(rows)
    assert dec.cache.shape[2] == len(rows) and dec.cache.data_ptr() == buffer
    assert torch.equal(dec.cache[:, :, :, :, :t], before[0])
    assert torch.equal(dec.bias, before[1]) and torch.equal(dec.pos, before[2])
    kv, d = dec.kv_heads, dec.head_dim
    assert torch.equal(dec.keys[1][:, :t].view(len(rows), kv, t, d), before[0][1, 0])
    with pytest.raises(ValueError, match="increasing"):
        dec.keep(torch.tensor([2, 1]))


def test_fast_engine_shared_prefix_decodes_as_rows_own_copies(model):
    """A prefill over the distinct prompts (groups of different sizes, rows of a group not adjacent) keeps each
    prompt's keys once and attends to it per group: every step's logits equal those of an engine whose rows hold
    their own copy of the prompt, also after rows are dropped (a whole group, and part of one)."""
    prompts = prompts_of([5, 8, 3, 6])
    inverse = torch.tensor([2, 0, 0, 3, 1, 0, 2, 1, 1, 0])  # group sizes 4, 3, 2, 1
    ids, mask = left_pad(prompts, PAD, model.device)
    shared, own = FastLlama(model, len(inverse), ids.shape[1] + 8), FastLlama(model, len(inverse), ids.shape[1] + 8)
    with torch.no_grad():
        a, b = shared.prefill(ids, mask, inverse), own.prefill(ids[inverse], mask[inverse])
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        assert shared.cache.shape == own.cache.shape and shared.shared is not None and own.shared is None
        for step in range(6):
            if step == 2:
                rows = torch.tensor([0, 1, 2, 4, 5, 6, 8, 9])  # the only row of group 3 and one of group 1 go
                shared.keep(rows)
                own.keep(rows)
                a, b = a[rows], b[rows]
            tokens = b.argmax(-1)
            a, b = shared.step(tokens), own.step(tokens)
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    lopsided = torch.tensor([0] * 7 + [1, 2, 3])  # a 4 x 7 grid for 10 rows: each row gets a copy instead
    dec, ref = (FastLlama(model, len(lopsided), ids.shape[1] + 2) for _ in range(2))
    with torch.no_grad():
        a, b = dec.prefill(ids, mask, lopsided), ref.prefill(ids[lopsided], mask[lopsided])
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        torch.testing.assert_close(dec.step(b.argmax(-1)), ref.step(b.argmax(-1)), rtol=0, atol=1e-5)
    assert dec.shared is None


# ----------------------------------------------------------------------------------------------------------------
# sampling


@pytest.mark.parametrize("engine", ENGINES)
def test_seeded_determinism(model, engine):
    def run(seed):
        return sample(model, prompts_of([4, 9, 6]), max_new_tokens=10, eos_token_id=EOS, pad_token_id=PAD,
                      temperature=1.0, top_p=0.9, seed=seed, engine=engine)

    a, b, c = run(3), run(3), run(4)
    torch.testing.assert_close(a.completion_ids, b.completion_ids, rtol=0, atol=0)
    torch.testing.assert_close(a.logprobs, b.logprobs, rtol=0, atol=0)
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_tiny_top_p_is_greedy(model):
    prompts = prompts_of([4, 9])
    g = greedy(model, prompts, "fast")
    r = sample(model, prompts, max_new_tokens=12, eos_token_id=[], pad_token_id=PAD, temperature=1.0, top_p=1e-6,
               seed=0)
    torch.testing.assert_close(r.completion_ids, g.completion_ids, rtol=0, atol=0)
    # log-probs are of the temperature-1 distribution before truncation, so the same as greedy's (not 0)
    torch.testing.assert_close(r.logprobs, g.logprobs, rtol=0, atol=1e-5)
    assert (r.logprobs < 0).all()


def test_nucleus_hand_computed():
    # mass before each token (sorted): 0, .5, .8, .95 -> with top_p .75 the 3rd and 4th are outside
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    torch.testing.assert_close(_nucleus(probs, 0.75), torch.tensor([[0.0, 0.5, 0.0, 0.3]]))
    torch.testing.assert_close(_nucleus(probs, 1e-9), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))


def test_sample_next_draws_from_the_distribution():
    # 20000 draws from softmax([0, log 3, -inf]) = (.25, .75, 0): counts within ~4.5 sigma (sigma = sqrt(n p q) = 61)
    logits = torch.tensor([[0.0, float(torch.log(torch.tensor(3.0))), -float("inf")]]).expand(20000, 3)
    uniforms = torch.rand(20000, 1, generator=torch.Generator().manual_seed(0))
    tokens, logps = sample_next(logits, 1.0, 1.0, uniforms)
    counts = torch.bincount(tokens, minlength=3)
    assert counts[2] == 0 and abs(int(counts[1]) - 15000) < 280
    lp1 = logps[tokens == 1]
    torch.testing.assert_close(lp1, torch.full_like(lp1, float(torch.log(torch.tensor(0.75)))))
    # temperature 2 flattens to softmax([0, log 3] / 2) = (1 / (1 + sqrt 3), sqrt 3 / (1 + sqrt 3)) = (.366, .634)
    tokens, _ = sample_next(logits, 2.0, 1.0, uniforms)
    assert abs(int((tokens == 1).sum()) - 12679) < 310


@pytest.mark.parametrize("engine", ENGINES)
def test_repeated_prompts_prefill_once_and_sample_as_single_rows(model, engine):
    """The sampler prefills each distinct prompt once and copies its cache to the rows that share it: every row
    still draws what it draws alone under its key (greedy and sampled), with the same log-probs."""
    prompts = [p for p in prompts_of([3, 11, 7]) for _ in range(3)]
    for temperature in (0.0, 1.0):
        kw = dict(max_new_tokens=10, eos_token_id=[EOS], pad_token_id=PAD, temperature=temperature, seed=4,
                  engine=engine)
        batch = sample(model, prompts, share_prompts=True, **kw)
        for i, p in enumerate(prompts):
            alone = sample(model, [p], row_keys=[i], **kw)
            n = int(alone.completion_mask.sum())
            assert torch.equal(batch.completion_ids[i, :n], alone.completion_ids[0, :n]), (temperature, i)
            torch.testing.assert_close(batch.logprobs[i, :n], alone.logprobs[0, :n], rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# fast engine == HF forward


FAST_CONFIGS = {
    "gqa-tied": {},
    "mha-bias-untied-linear-rope-headdim": dict(num_key_value_heads=4, attention_bias=True, mlp_bias=True,
                                                tie_word_embeddings=False, head_dim=16,
                                                rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                 "rope_theta": 500.0}),
}


@pytest.mark.parametrize("name", list(FAST_CONFIGS))
def test_fast_engine_logits_match_hf(name):
    """Prefill + 6 cached steps of the fast engine == a full uncached HF forward over the same left-padded batch."""
    m = tiny_llama(seed=1, **FAST_CONFIGS[name])
    assert fast_path_unsupported(m) is None
    ids, mask = left_pad(prompts_of([3, 10, 6]), PAD)
    with torch.no_grad():
        eng = FastLlama(m, 3, ids.shape[1] + 6)
        logits = [eng.prefill(ids, mask)]
        steps = []
        for _ in range(6):
            steps.append(logits[-1].argmax(-1))
            logits.append(eng.step(steps[-1]))
        full_ids = torch.cat([ids, torch.stack(steps, 1)], 1)
        full_mask = torch.cat([mask, torch.ones(3, 6, dtype=mask.dtype)], 1)
        ref = m(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
    torch.testing.assert_close(torch.stack(logits, 1), ref[:, ids.shape[1] - 1:], rtol=0, atol=1e-4)


def test_hf_decoder_logits_match_full_forward(model):
    ids, mask = left_pad(prompts_of([3, 8]), PAD)
    with torch.no_grad():
        dec = HFDecoder(model, 2, ids.shape[1] + 2)
        first = dec.prefill(ids, mask)
        nxt = dec.step(first.argmax(-1))
        full_ids = torch.cat([ids, first.argmax(-1)[:, None]], 1)
        full_mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1)
        ref = model(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
    torch.testing.assert_close(torch.stack([first, nxt], 1), ref[:, -2:], rtol=0, atol=1e-4)


def test_other_architectures_fall_back_to_hf():
    torch.manual_seed(0)
    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None)).eval()
    assert "Qwen2ForCausalLM" in fast_path_unsupported(qwen)
    with pytest.raises(ValueError, match="does not support"):
        sample(qwen, [[5, 6]], max_new_tokens=2, eos_token_id=EOS, pad_token_id=PAD, seed=0, engine="fast")
    with pytest.raises(ValueError, match="valid: auto, fast, hf"):
        sample(qwen, [[5, 6]], max_new_tokens=2, eos_token_id=EOS, pad_token_id=PAD, seed=0, engine="vllm")
    r = sample(qwen, prompts_of([3, 7]), max_new_tokens=6, eos_token_id=EOS, pad_token_id=PAD,
               seed=0)  # auto -> hf
    scored = sequence_logprobs(qwen, r.input_ids, r.attention_mask, r.completion_ids.shape[1])
    m = r.loss_mask.bool()
    torch.testing.assert_close(scored[m], r.logprobs[m], rtol=0, atol=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# row-keyed noise: what makes a batch split over processes sample what one process samples


def test_row_noise_depends_only_on_seed_step_and_key():
    full = RowNoise(7, range(6))
    rows = torch.arange(6)
    split = RowNoise(7, [4, 5])  # the last two rows, sampled on their own with their global keys
    torch.testing.assert_close(split.uniform(3, torch.arange(2)), full.uniform(3, rows)[4:], rtol=0, atol=0)
    assert not torch.equal(full.uniform(3, rows), full.uniform(4, rows))  # a new draw every step ...
    assert not torch.equal(RowNoise(8, range(6)).uniform(3, rows), full.uniform(3, rows))  # ... and seed
    u = torch.cat([RowNoise(s, range(1000)).uniform(0, torch.arange(1000)) for s in range(20)])
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0 and abs(float(u.mean()) - 0.5) < 0.01


@pytest.mark.parametrize("engine", ["fast", "hf"])
def test_a_split_batch_samples_what_the_whole_batch_samples(model, engine):
    prompts = prompts_of([3, 7, 5, 4, 6, 2], seed=3)
    kw = dict(max_new_tokens=10, eos_token_id=EOS, pad_token_id=PAD, temperature=1.0, seed=11, engine=engine)
    whole = sample(model, prompts, **kw)
    halves = [sample(model, prompts[:2], row_keys=[0, 1], **kw), sample(model, prompts[2:], row_keys=range(2, 6), **kw)]
    for part, rows in zip(halves, (slice(0, 2), slice(2, 6)), strict=True):
        t = part.completion_ids.shape[1]
        assert torch.equal(part.completion_ids, whole.completion_ids[rows, :t])
        torch.testing.assert_close(part.logprobs, whole.logprobs[rows, :t], rtol=0, atol=1e-5)
    other = sample(model, prompts, **(kw | {"seed": 12}))
    assert not torch.equal(other.completion_ids, whole.completion_ids)


def test_sampling_without_a_seed_is_refused(model):
    with pytest.raises(ValueError, match="needs a seed"):
        sample(model, [[5, 6]], max_new_tokens=2, eos_token_id=EOS, pad_token_id=PAD, temperature=1.0)


@pytest.mark.parametrize("engine", ["fast", "hf"])
def test_bfloat16_decoding_agrees_with_float32_decoding(model, engine):
    """The engine decodes in the asked precision (fast: a bf16 copy of the weights; hf: autocast); the greedy
    continuation of a tiny random model mostly survives the rounding and the log-probs stay close."""
    prompts = prompts_of([3, 7, 5, 4], seed=5)
    kw = dict(max_new_tokens=6, eos_token_id=[], pad_token_id=PAD, temperature=0.0, engine=engine)
    fp32, bf16 = sample(model, prompts, **kw), sample(model, prompts, dtype=torch.bfloat16, **kw)
    assert bf16.logprobs.dtype == torch.float32 and bf16.completion_ids.shape == fp32.completion_ids.shape
    assert float((bf16.completion_ids[:, 0] == fp32.completion_ids[:, 0]).float().mean()) >= 0.75
    first = bf16.completion_ids[:, 0] == fp32.completion_ids[:, 0]
    torch.testing.assert_close(bf16.logprobs[first, 0], fp32.logprobs[first, 0], rtol=0, atol=0.1)



def test_fast_engine_in_bfloat16_attends_in_float32_on_a_cpu(model):
    """On a CPU the bf16 engine keeps its weights (and their matmuls) in bf16 but its KV cache, scores and softmax in
    float32 (there bf16 batched matmuls over the cache's slices copy their operands first: slower than float32);
    the shared-prompt attention reads that float32 cache as the rows' own copies do."""
    prompts = prompts_of([5, 8, 3])
    inverse = torch.tensor([1, 0, 0, 2, 1])
    ids, mask = left_pad(prompts, PAD, model.device)
    shared, own = (FastLlama(model, len(inverse), ids.shape[1] + 4, dtype=torch.bfloat16) for _ in range(2))
    assert shared.cache.dtype == torch.float32 and shared.layers[0].wqkv.dtype == torch.bfloat16
    with torch.no_grad():
        a, b = shared.prefill(ids, mask, inverse), own.prefill(ids[inverse], mask[inverse])
        assert shared.shared is not None and shared.shared.k[0].dtype == torch.float32
        for _ in range(3):
            torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=0.05)
            tokens = b.argmax(-1)
            a, b = shared.step(tokens), own.step(tokens)
