"""Sharded weights and optimiser state in a checkpoint: torch.distributed.checkpoint (DCP),
read without running anything from the files.

Each rank writes its own shards (`__R_0.distcp`) and rank 0 the index (`.metadata`); loading
reshards to whatever the loading run's world size is (2 ranks -> 1 and 1 -> 2 both work, and
one process without any process group reads them too). Stock DCP reads `.metadata` with plain
`pickle.load` and non-tensor entries (optimiser hyperparameters) with
`torch.load(weights_only=False)`: either could run code from a tampered checkpoint. Here the
index is unpickled with an allow-list of DCP's own metadata classes, and every other entry
with `weights_only=True`.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch

from ascent.errors import AscentError

SHARDS_DIR = "shards"

# The globals a DCP index refers to (torch 2.x): its metadata dataclasses, tensor properties,
# and the path type of the storage info. Nothing here runs code when rebuilt.
_INDEX_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "MetadataIndex",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch", "strided"),
    ("torch._utils", "_get_layout"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib._local", "PosixPath"),
    ("collections", "OrderedDict"),
} | {("torch", name) for name in ("float32", "float64", "bfloat16", "float16", "int64", "int32",
                                   "int8", "uint8", "bool")}  # fmt: skip


class _IndexUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _INDEX_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint index")
        return super().find_class(module, name)


def _reader(path: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            index = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(index, "rb") as stream:
                metadata = _IndexUnpickler(stream).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(path))


def _planner() -> Any:
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            obj = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    return SafePlanner()


def save_shards(directory: Path, state: dict[str, Any]) -> None:
    """Every rank's shards of `state` (from the workers' `checkpoint_state`) into
    `directory/shards/`; a collective: all ranks call it with the same directory."""
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "torch.distributed is disabled": one process writes too
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=str(directory / SHARDS_DIR))


def load_shards(directory: Path, state: dict[str, Any]) -> None:
    """Fill `state` (templates from `checkpoint_state`, whatever the world size now) from
    `directory/shards/`, resharding as needed; one line naming the folder when it is not a
    readable checkpoint."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    folder = directory / SHARDS_DIR
    if not (folder / ".metadata").is_file():
        raise AscentError(
            f"{folder}: no sharded weights (no .metadata); the checkpoint is incomplete"
        )
    try:
        with warnings.catch_warnings():  # "torch.distributed is disabled": one process reads too
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(state, storage_reader=_reader(folder), planner=_planner())
    except pickle.UnpicklingError:
        raise AscentError(
            f"{folder}: refused: it holds objects other than tensors and plain values, which "
            "could run code; nothing in it was run"
        ) from None
    except (Exception, CheckpointException) as err:  # DCP wraps read errors in its own
        # types, CheckpointException among them, which is a BaseException
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise AscentError(
            f"{folder}: the sharded weights do not load ({type(err).__name__}: {first}); the "
            "checkpoint is damaged, or the run's config is not the one it was written with"
        ) from None
