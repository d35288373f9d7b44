"""Weight transports: what the engine reads is, bit for bit, what the trainer sent, whichever
way it travels; a reader never sees a half-written version and released ones are gone."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file

from ascent.models import build_tiny_model
from ascent.rollout.transformers_engine import TransformersEngine
from ascent.rollout.transport import InPlace, SafetensorsDir, StateDict


def weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(8, 4, generator=g)
    # a tied weight: one tensor under two names, as a model with tied embeddings reports it
    return {"embed.weight": embed, "head.weight": embed, "norm.weight": torch.rand(4, generator=g)}


def test_a_state_dict_copy_is_not_changed_by_the_trainers_next_update():
    sent = weights()
    parcel = StateDict(clone=True).send(sent.items(), version=1)
    expected = {k: v.clone() for k, v in sent.items()}
    for t in sent.values():
        t.add_(1.0)  # the trainer's next optimiser step, in place
    assert parcel.keys() == expected.keys()
    assert all(torch.equal(parcel[k], expected[k]) for k in expected)


def test_an_uncloned_state_dict_hands_over_the_tensors_themselves():
    sent = weights()
    parcel = StateDict(clone=False).send(sent.items(), version=1)
    assert all(parcel[k].data_ptr() == sent[k].data_ptr() for k in sent)


def test_safetensors_versions_land_whole_and_released_ones_are_removed(tmp_path):
    transport = SafetensorsDir(tmp_path / "sync")
    first = transport.send(weights(0).items(), version=1)
    second = transport.send(weights(1).items(), version=2)
    assert first.name == "version-000001" and second.name == "version-000002"
    read = load_file(second / "model.safetensors")
    assert read.keys() == weights(1).keys()  # tied weights under each name
    assert all(torch.equal(read[k], v) for k, v in weights(1).items())
    transport.release(first)
    assert sorted(os.listdir(tmp_path / "sync")) == ["version-000002"]  # no temporary left


def test_a_version_is_renamed_into_place_only_once_written(tmp_path, monkeypatch):
    """A failure while writing leaves the previous version the only one a reader can see."""
    transport = SafetensorsDir(tmp_path)
    transport.send(weights(0).items(), version=1)

    def fails(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("safetensors.torch.save_file", fails)
    with pytest.raises(OSError, match="disk full"):
        transport.send(weights(1).items(), version=2)
    assert [p.name for p in tmp_path.glob("version-*")] == ["version-000001"]


def test_each_engine_names_its_transport():
    model, _ = build_tiny_model()
    live = TransformersEngine(live=lambda: torch.no_grad(), pad_id=0, eos_ids=[1])
    own = TransformersEngine(model, pad_id=0, eos_ids=[1])
    assert isinstance(live.transport, InPlace) and live.transport.name == "in_place"
    assert own.transport.name == "state_dict"
    state = {k: v + 0.5 for k, v in model.state_dict().items()}
    own.sync_weights(state.items(), version=3)
    own._apply_staged()
    assert own.version == 3
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
