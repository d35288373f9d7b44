"""The transformers engine: shapes, masks, EOS handling, and log-probs equal to a forward pass."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from ascent.models import build_tiny_model
from ascent.rollout import RolloutBatch, SamplingParams, TransformersEngine
from ascent.rollout.decoders import StaticLlamaDecoder
from ascent.train.forward import response_logprobs

EOS, PAD = 1, 0


def small(kind: str) -> torch.nn.Module:
    """A few-thousand-parameter model of each supported family (GQA, biases)."""
    common = dict(
        vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS,
    )  # fmt: skip
    torch.manual_seed(0)
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common))
    if kind == "llama-bias":
        return LlamaForCausalLM(LlamaConfig(**common, attention_bias=True, mlp_bias=True))
    return build_tiny_model()[0]


PROMPTS = {
    "equal": [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]],
    "ragged": [[5], [9, 10, 11, 12, 13, 14], [20, 21, 22]],
}


def generate(model, prompts, fast=True, n=4, seed=0, **kw) -> RolloutBatch:
    engine = TransformersEngine(model, pad_id=PAD, eos_ids=[EOS], fast=fast)
    params = SamplingParams(kw.pop("max_new_tokens", 12), **kw)
    gen = torch.Generator().manual_seed(seed)
    return engine.generate(prompts, [10 + i for i in range(len(prompts))], n, params, gen)


@pytest.mark.parametrize("kind", ["tiny", "qwen2", "llama-bias"])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("layout", ["equal", "ragged"])
def test_engine_logprobs_equal_a_teacher_forced_forward(kind, fast, layout):
    model = small(kind)
    assert StaticLlamaDecoder.supports(model)
    batch = generate(model, PROMPTS[layout], fast=fast, temperature=0.8)
    logp, _ = response_logprobs(model, batch, temperature=0.8)
    mask = batch.response_mask.bool()
    assert torch.allclose(logp[mask], batch.logprobs[mask], atol=1e-5)


@pytest.mark.parametrize("layout", ["equal", "ragged"])
def test_fast_and_generic_decoders_sample_the_same_tokens(layout):
    model = small("tiny")
    a = generate(model, PROMPTS[layout], fast=True)
    b = generate(model, PROMPTS[layout], fast=False)
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_shapes_group_ids_and_prompt_padding():
    batch = generate(small("tiny"), PROMPTS["ragged"], n=3, max_new_tokens=5)
    b, p = 9, 6
    assert batch.prompt_ids.shape == (b, p) and batch.response_ids.shape[0] == b
    assert batch.response_ids.shape[1] <= 5
    assert batch.group_ids.tolist() == [10, 10, 10, 11, 11, 11, 12, 12, 12]
    assert batch.prompt_mask.sum(-1).tolist() == [1, 1, 1, 6, 6, 6, 3, 3, 3]
    assert torch.equal(batch.prompt_ids[0], torch.tensor([PAD] * 5 + [5]))


def with_eos_bias(model: torch.nn.Module, bias: float) -> torch.nn.Module:
    """The model with a logit bias towards EOS (an untied lm_head with a bias term)."""
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[EOS] = bias
    model.lm_head = head
    return model


def test_eos_stops_a_row_and_masks_everything_after_it():
    model = with_eos_bias(small("tiny"), 1.0)  # many rows end early (about 2 in 3), not all
    batch = generate(model, PROMPTS["equal"], n=16, max_new_tokens=20)
    ends = batch.response_ids == EOS
    assert batch.finished.any() and not batch.finished.all()
    for row in range(len(batch)):
        hits = ends[row].nonzero().flatten()
        if batch.finished[row]:
            stop = int(hits[0])
            assert batch.response_mask[row, : stop + 1].eq(1).all()  # EOS itself is a policy token
            assert batch.response_mask[row, stop + 1 :].eq(0).all()
            assert batch.response_ids[row, stop + 1 :].eq(PAD).all()
            assert batch.logprobs[row, stop + 1 :].eq(0).all()
        else:
            assert len(hits) == 0 and batch.response_mask[row].eq(1).all()
    assert batch.response_lengths.max() == batch.response_ids.shape[1]


def test_decoding_stops_when_every_row_has_ended():
    model = with_eos_bias(small("tiny"), 4.0)
    batch = generate(model, PROMPTS["equal"], n=4, max_new_tokens=50)
    assert batch.finished.all()
    assert batch.response_ids.shape[1] == int(batch.response_lengths.max()) < 50


def test_same_generator_seed_same_samples_and_model_mode_is_restored():
    model = small("tiny")
    model.train()
    a = generate(model, PROMPTS["equal"], seed=3)
    b = generate(model, PROMPTS["equal"], seed=3)
    c = generate(model, PROMPTS["equal"], seed=4)
    assert torch.equal(a.response_ids, b.response_ids)
    assert not torch.equal(a.response_ids, c.response_ids)
    assert model.training


def test_an_engine_with_its_own_copy_samples_the_weights_it_was_synced_with():
    import contextlib

    trainer, _ = build_tiny_model(seed=1)
    own, _ = build_tiny_model(seed=2)  # other weights, same architecture
    live = TransformersEngine(
        live=lambda: contextlib.nullcontext(trainer), pad_id=PAD, eos_ids=[EOS]
    )
    copy = TransformersEngine(own, pad_id=PAD, eos_ids=[EOS])
    assert live.exact_logprobs and not copy.exact_logprobs
    prompts, params = PROMPTS["ragged"], SamplingParams(8, greedy=True)

    def run(engine):
        return engine.generate(prompts, [0, 1, 2], 1, params)

    before = run(copy)
    assert not torch.equal(before.logprobs, run(live).logprobs)
    copy.sync_weights(trainer.named_parameters(), version=3)
    assert not before.versions.any()  # staged: swapped in at the next generate call
    after, reference = run(copy), run(live)
    assert torch.equal(after.response_ids, reference.response_ids)
    assert torch.allclose(after.logprobs, reference.logprobs, atol=1e-6)
    assert after.versions.tolist() == [3, 3, 3] and own is not trainer
    with pytest.raises(ValueError, match=r"unknown \['lm_head.bias'\]"):
        copy.sync_weights([("lm_head.bias", torch.zeros(3))], version=4)
        run(copy)


def test_a_live_engine_only_records_the_version_and_never_reads_the_weights():
    import contextlib

    model, _ = build_tiny_model()
    engine = TransformersEngine(
        live=lambda: contextlib.nullcontext(model), pad_id=PAD, eos_ids=[EOS]
    )

    def weights():
        raise AssertionError("a live engine must not consume the weight stream")
        yield  # pragma: no cover

    engine.sync_weights(weights(), version=7)
    batch = engine.generate(PROMPTS["equal"], [0, 1, 2], 2, SamplingParams(4, greedy=True))
    assert batch.versions.tolist() == [7] * 6


@pytest.mark.parametrize("fast", [True, False])
def test_rows_that_end_leave_the_decoder_and_the_rest_keep_exact_logprobs(fast, monkeypatch):
    """Most rows end early (EOS bias): the decoder drops them as it goes (keep is called),
    and every row's log-probs still equal a teacher-forced forward over its tokens."""
    from ascent.rollout import decoders

    kept = []
    for cls in (decoders.StaticLlamaDecoder, decoders.CacheDecoder):
        original = cls.keep
        monkeypatch.setattr(
            cls, "keep", lambda self, rows, _f=original: kept.append(len(rows)) or _f(self, rows)
        )
    model = with_eos_bias(small("tiny"), 1.0)
    batch = generate(model, PROMPTS["ragged"], fast=fast, n=16, max_new_tokens=30)
    assert kept and all(a > b for a, b in itertools.pairwise(kept))  # each one smaller
    assert batch.finished.any() and not batch.finished.all()
    logp, _ = response_logprobs(model, batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(logp[mask], batch.logprobs[mask], atol=1e-5)
    assert batch.response_ids[~mask].eq(PAD).all()


def test_long_completions_run_to_max_new_tokens_with_exact_logprobs():
    """600 new tokens, past any length the tiny task uses, with EOS made unlikely."""
    model = with_eos_bias(small("tiny"), -20.0)
    batch = generate(model, PROMPTS["equal"], n=2, max_new_tokens=600)
    assert batch.response_ids.shape == (6, 600) and not batch.finished.any()
    logp, _ = response_logprobs(model, batch)
    assert torch.allclose(logp, batch.logprobs, atol=1e-4)


def test_stop_strings_end_a_row_at_the_token_that_completes_them(smollm2_dir, smollm2_tokenizer):
    """SmolLM2 counting, greedy: each stop string ends its row at the token completing it
    (kept in the completion, the row finished), also one spanning several tokens."""
    from transformers import AutoModelForCausalLM

    tok = smollm2_tokenizer
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    engine = TransformersEngine(
        model, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id], decode=tok.decode
    )
    prompt = tok("Count from one to ten: 1, 2, 3,")["input_ids"]

    def text(stop):
        params = SamplingParams(40, greedy=True, stop=stop)
        batch = engine.generate([prompt], [0], 1, params)
        ids = batch.response_ids[0][batch.response_mask[0].bool()].tolist()
        return ids, bool(batch.finished[0])

    free = tok.decode(text(())[0])
    assert "6, 7" in free  # what the model says without stop strings
    for stop in ((" 6",), ("6, 7",), ("nothing like this", "5,")):
        ids, finished = text(stop)
        out, before_last = tok.decode(ids), tok.decode(ids[:-1])
        assert finished and free.startswith(out)  # the same greedy text, cut short
        assert any(s in out for s in stop), (stop, out)
        assert not any(s in before_last for s in stop)  # cut at the completing token
    with pytest.raises(ValueError, match="decode"):
        TransformersEngine(model, pad_id=0, eos_ids=[2]).generate(
            [prompt], [0], 1, SamplingParams(4, stop=("x",))
        )


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_being_sampled_never_gets_weights_synced_in_the_middle(fast, monkeypatch):
    """Asynchronous rollouts with an evaluation in between: a prefetch thread samples with
    version 0 while the trainer syncs version 1 and evaluates on the same engine. The
    prefetched batch must be version 0's from its first token to its last, and say so; the
    evaluation waits for it and then samples version 1's weights."""
    import copy
    import threading
    import time

    from ascent.rollout import transformers_engine

    old, _ = build_tiny_model(seed=1)
    new, _ = build_tiny_model(seed=2)
    prompts, groups, params = PROMPTS["ragged"], [0, 1, 2], SamplingParams(40)

    def sample(engine):
        return engine.generate(prompts, groups, 2, params, torch.Generator().manual_seed(0))

    def fresh(model):
        return TransformersEngine(copy.deepcopy(model), pad_id=PAD, eos_ids=[EOS], fast=fast)

    want_old, want_new = sample(fresh(old)), sample(fresh(new))
    engine = fresh(old)
    decoding = threading.Event()
    real_sample_next = transformers_engine.sample_next

    def slow_sample_next(*args, **kwargs):  # the prefetch thread is mid-batch for ~0.4 s
        decoding.set()
        time.sleep(0.01)
        return real_sample_next(*args, **kwargs)

    monkeypatch.setattr(transformers_engine, "sample_next", slow_sample_next)
    prefetched = {}
    worker = threading.Thread(target=lambda: prefetched.update(batch=sample(engine)))
    worker.start()
    assert decoding.wait(10)
    engine.sync_weights(new.named_parameters(), version=1)
    evaluated = sample(engine)
    worker.join(30)
    batch = prefetched["batch"]
    assert batch.versions.tolist() == [0] * 6
    assert torch.equal(batch.response_ids, want_old.response_ids)
    assert evaluated.versions.tolist() == [1] * 6
    assert torch.equal(evaluated.response_ids, want_new.response_ids)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("layout", ["equal", "ragged"])
def test_a_partial_generation_takes_new_weights_mid_row_and_keeps_every_tokens_logprob(
    fast, layout, monkeypatch
):
    """[rollout] partial: the trainer publishes version 1 while a batch is being sampled with
    version 0. The rows go on with version 1's weights from the next token: the tokens
    sampled so far and their log-probs stay (version 0's, as a teacher-forced forward of the
    old model gives them), every later token's log-prob is the new model's own over the whole
    row (its cache was recomputed with the new weights), and the rows say version 0, the
    oldest that sampled them."""
    import copy

    from ascent.rollout import transformers_engine

    old, _ = build_tiny_model(seed=1)
    new, _ = build_tiny_model(seed=2)
    engine = TransformersEngine(
        copy.deepcopy(old), pad_id=PAD, eos_ids=[EOS], fast=fast, partial=True
    )
    real_sample_next, calls = transformers_engine.sample_next, []

    def publish_during_the_third_token(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the trainer's update lands while token 2 is being sampled
            engine.sync_weights(new.named_parameters(), version=1)
        return real_sample_next(*args, **kwargs)

    monkeypatch.setattr(transformers_engine, "sample_next", publish_during_the_third_token)
    prompts = PROMPTS[layout]
    batch = engine.generate(
        prompts, list(range(len(prompts))), 2, SamplingParams(12), torch.Generator().manual_seed(0)
    )
    assert engine.swaps == 1 and engine.version == 1
    assert batch.versions.tolist() == [0] * len(batch)
    mask = batch.response_mask.bool()
    assert int(mask[:, 3:].sum()) > 0  # rows went on past the swap
    by_old, _ = response_logprobs(old, batch)
    by_new, _ = response_logprobs(new, batch)
    before, after = mask.clone(), mask.clone()
    before[:, 3:] = False  # tokens 0-2: sampled before the swap
    after[:, :3] = False
    assert torch.allclose(batch.logprobs[before], by_old[before], atol=1e-5)
    assert torch.allclose(batch.logprobs[after], by_new[after], atol=1e-5)
    assert not torch.allclose(batch.logprobs[after], by_old[after], atol=1e-3)


def test_without_partial_a_generation_finishes_on_the_weights_it_started_with(monkeypatch):
    import copy

    from ascent.rollout import transformers_engine

    old, _ = build_tiny_model(seed=1)
    new, _ = build_tiny_model(seed=2)
    engine = TransformersEngine(copy.deepcopy(old), pad_id=PAD, eos_ids=[EOS])
    real_sample_next, calls = transformers_engine.sample_next, []

    def publish_mid_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            engine.sync_weights(new.named_parameters(), version=1)
        return real_sample_next(*args, **kwargs)

    monkeypatch.setattr(transformers_engine, "sample_next", publish_mid_batch)
    batch = engine.generate(PROMPTS["equal"], [0, 1, 2], 2, SamplingParams(12))
    by_old, _ = response_logprobs(old, batch)
    mask = batch.response_mask.bool()
    assert engine.swaps == 0 and engine.version == 0  # staged for the next call
    assert torch.allclose(batch.logprobs[mask], by_old[mask], atol=1e-5)
