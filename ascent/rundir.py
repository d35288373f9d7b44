"""The run directory: `runs/<name>/`, its layout, and writes that are never seen half done.

    config.toml      the resolved config the run used (its latest segment's, after resumes)
    config-history/  segment-N.toml: the config of each earlier segment, kept when a
                     --resume changed settings (what changed heads each file)
    metrics.jsonl    one JSON object per logged step
    samples/         sample completions / episodes
    checkpoints/     step-000100/ ... (complete checkpoints; see ascent.train.checkpoint for
                     what is in one), best.json, .tmp-* saves in progress
    final-model/     the trained policy as a save_pretrained directory (LLM runs)
    summary.json     written at the end of every run

Everything here is plain file handling shared by the trainers (`ascent.train`) and what reads
their output (`ascent.observe`, `ascent.api`): atomic text and directory replacement, checkpoint
names and listing, and `RunDir`.

An existing run directory is never overwritten unless the user says `--overwrite`; `--resume`
continues it from its latest checkpoint, refusing settings its checkpoints cannot continue
under (ascent.configfile.resume) and naming the ones it takes. A run holds an exclusive lock
on its directory (`.lock`, with the holder's PID) from `RunDir.create` until `release` (the
end of `run_training`, or the process's exit, however it ends), so a second `ascent train`
can neither `--overwrite` nor `--resume` a run that is still going. A run killed before its first
checkpoint has nothing to continue from: `--resume` starts it again in place (its partial
metrics and samples are dropped, so every step is logged once). A staged run resumes stage
by stage (llm_stages.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.configfile import AnyConfig, dump_config, load_config
from ascent.configfile.resume import Change, config_changes, describe
from ascent.errors import AscentError

META_FILE = "meta.json"
MANIFEST_FILE = "manifest.json"  # every other file of a checkpoint: its size and sha256
BEST_FILE = "best.json"
PREFIX = "step-"
FINAL_MODEL = "final-model"
CONFIG_HISTORY = "config-history"


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that readers see the old or the new file, never half."""
    for stale in path.parent.glob(f".{path.name}.tmp-*"):  # debris of a killed write
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the complete directory `tmp` to `final`, replacing what is there without a gap."""
    _fsync_tree(tmp)
    if final.exists():
        old = final.parent / f".tmp-old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:06d}"


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [
        p
        for p in ckpt_dir.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and (p / META_FILE).is_file()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def write_manifest(checkpoint: Path) -> None:
    """Record every file of a checkpoint being written (its size and sha256), so that a
    later `--resume` can tell an intact checkpoint from one damaged since."""
    files = {
        path.relative_to(checkpoint).as_posix(): {
            "bytes": path.stat().st_size,
            "sha256": _hash(path),
        }
        for path in sorted(checkpoint.rglob("*"))
        if path.is_file() and path.name != MANIFEST_FILE
    }
    write_json_atomic(checkpoint / MANIFEST_FILE, {"files": files})


def checkpoint_problem(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint against its manifest (the first file that is missing,
    of another size or changed); None when it is intact, or from before manifests."""
    manifest = checkpoint / MANIFEST_FILE
    if not manifest.exists():
        return None
    try:
        files = json.loads(manifest.read_text())["files"]
        entries = [(name, int(e["bytes"]), str(e["sha256"])) for name, e in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"{MANIFEST_FILE}: unreadable"
    for name, size, _digest in entries:  # sizes first: cheap, and what a cut-off write leaves
        path = checkpoint / name
        if not path.is_file():
            return f"{name}: missing"
        if path.stat().st_size != size:
            return f"{name}: {path.stat().st_size} bytes, its manifest says {size}"
    for name, _size, digest in entries:
        if _hash(checkpoint / name) != digest:
            return f"{name}: its contents changed since it was written"
    return None


def resume_point(run_path: Path) -> tuple[Path | None, list[str]]:
    """The checkpoint a resume continues from: the newest intact one, with a note for each
    newer one passed over as damaged; with none intact, one line naming each one's damage.
    Checkpoints from before manifests count as intact (their loading still refuses what it
    cannot read, in one line)."""
    found = list_checkpoints(_ckpt_dir(run_path))
    notes = []
    for checkpoint in reversed(found):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            if notes:
                notes.append(f"resuming from {checkpoint.name}, the newest intact checkpoint")
            return checkpoint, notes
        notes.append(f"{checkpoint} is damaged ({problem})")
    if found:
        raise AscentError(
            f"--resume {run_path}: no intact checkpoint: {'; '.join(notes)}; start the run "
            "again (--overwrite) or restore the checkpoints from a copy"
        )
    return None, []


def _hash(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def latest_checkpoint(run_or_ckpt_dir: Path) -> Path | None:
    ckpt_dir = _ckpt_dir(Path(run_or_ckpt_dir))
    found = list_checkpoints(ckpt_dir)
    return found[-1] if found else None


def best_checkpoint(run_or_ckpt_dir: Path) -> Path | None:
    ckpt_dir = _ckpt_dir(Path(run_or_ckpt_dir))
    best = read_best(ckpt_dir)
    if best is None:
        return None
    path = ckpt_dir / checkpoint_name(int(best["step"]))
    return path if (path / META_FILE).is_file() else None


def _ckpt_dir(path: Path) -> Path:
    return path / "checkpoints" if (path / "checkpoints").is_dir() else path


def read_best(ckpt_dir: Path) -> dict[str, Any] | None:
    try:
        best = json.loads((ckpt_dir / BEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, not a directory, damaged: no best to offer
        return None
    return best if isinstance(best, dict) and isinstance(best.get("step"), int) else None


LOCK_FILE = ".lock"
_held: dict[Path, Any] = {}  # run directory -> the open lock file this process holds


def lock(path: Path) -> None:
    """Take the run directory's exclusive lock, or say (one line) which process holds it.
    A lock this process already holds is kept; file systems without locks go unlocked."""
    key = path.resolve()
    mine = _held.get(key)
    if mine is not None and _same_file(mine, path / LOCK_FILE):
        return
    handle = open(path / LOCK_FILE, "a+")  # noqa: SIM115  (held until release)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise AscentError(
            f"run directory {path} is in use by another ascent process (PID {holder}); wait "
            "for it to end (or stop it), or use another run.name"
        ) from None
    except OSError:  # no locks on this file system: go on unlocked
        handle.close()
        return
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    if mine is not None:
        mine.close()
    _held[key] = handle


def release(path: Path) -> None:
    """Give the run directory's lock back (a no-op when this process does not hold it)."""
    handle = _held.pop(path.resolve(), None)
    if handle is not None:
        handle.close()


def locked_by(path: Path) -> str | None:
    """The PID of another process holding the run directory's lock, without taking it (None:
    free, or not a directory); nothing is written."""
    lock_path = path / LOCK_FILE
    key = path.resolve()
    if key in _held or not lock_path.is_file():
        return None
    try:
        with open(lock_path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return handle.read().strip() or "?"
            except OSError:
                return None
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return None
    return None


def _same_file(handle: Any, path: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino == path.stat().st_ino
    except OSError:
        return False


def resume_changes(path: Path, cfg: AnyConfig) -> list[Change]:
    """How `cfg` differs from the config run `path` was last trained with; raises, naming
    each one, when a change is one its checkpoints cannot continue under."""
    recorded = path / "config.toml"
    if not recorded.is_file():
        return []
    try:
        old = load_config(recorded)
    except AscentError as err:
        raise AscentError(
            f"--resume {path}: its config.toml does not load, so the settings cannot be "
            f"compared ({err})"
        ) from None
    changes = config_changes(old, cfg)
    refused = [f"{change} ({change.refusal})" for change in changes if change.refusal]
    if refused:
        raise AscentError(
            f"--resume {path}: cannot continue under changed settings: {'; '.join(refused)}; "
            f"resume with the run's own config (ascent train --resume {path}, no CONFIG) or "
            "start a new run (--set run.name=NEW)"
        )
    return changes


def _vacant(path: Path) -> bool:
    """An empty directory, or one holding only the lock file of a run killed before it wrote
    its config.toml (nobody holds it: `check` refused a held one already), which a new run
    may take over without --overwrite."""
    return (
        path.is_dir() and not path.is_symlink() and {p.name for p in path.iterdir()} <= {LOCK_FILE}
    )


def is_run_dir(path: Path) -> bool:
    """A directory `RunDir.create` made: it writes config.toml first of all."""
    return path.is_dir() and not path.is_symlink() and (path / "config.toml").is_file()


@dataclass(frozen=True)
class RunDir:
    path: Path
    resume_from: Path | None = None  # the checkpoint to continue from, when resuming
    resuming: bool = False  # --resume was given (a staged run resumes its stages)

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def samples_dir(self) -> Path:
        return self.path / "samples"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def config_path(self) -> Path:
        return self.path / "config.toml"

    @staticmethod
    def check(cfg: AnyConfig, *, resume: Path | None = None, overwrite: bool = False) -> str:
        """What `create` would do with these arguments, or the one-line refusal it would give
        (raised), without writing anything: `ascent train --dry-run`."""
        return RunDir._examine(cfg, resume, overwrite)[0]

    @staticmethod
    def _examine(
        cfg: AnyConfig, resume: Path | None, overwrite: bool
    ) -> tuple[str, tuple[Path | None, list[str]] | None]:
        """`check`'s line, and for a resume the checkpoint it continues from (with notes), so
        that `create` does not hash the checkpoint's files a second time."""
        if resume is not None and overwrite:
            raise AscentError("--resume and --overwrite contradict each other; pass one of them")
        path = Path(resume) if resume is not None else Path(cfg.run.output_dir) / cfg.run.name
        holder = locked_by(path) if path.is_dir() else None
        if holder is not None:
            raise AscentError(
                f"run directory {path} is in use by another ascent process (PID {holder}); wait "
                "for it to end (or stop it), or use another run.name"
            )
        if resume is not None:
            if not path.is_dir():
                raise AscentError(f"--resume {path}: no such run directory; check the path")
            point = resume_point(path)
            ckpt, notes = point
            if ckpt is not None:
                changes = resume_changes(path, cfg)
                said = "".join(f" ({note})" for note in notes[:1])
                if changes:
                    line = f"{path}: resumes from {ckpt.name}{said} with {describe(changes)}"
                    return line, point
                return f"{path}: resumes from {ckpt.name}{said}", point
            if not (path / "config.toml").is_file() and not getattr(cfg, "stages", None):
                raise AscentError(
                    f"--resume {path}: not a run directory (no config.toml, no checkpoint); "
                    "check the path"
                )
            return f"{path}: no checkpoint yet, starts again from step 0", point
        if path.exists() and not _vacant(path):
            if not overwrite:
                raise AscentError(
                    f"run directory {path} already exists; pass --resume {path} to continue it, "
                    "--overwrite to replace it, or --set run.name=NEW for a new run"
                )
            if not is_run_dir(path):
                raise AscentError(
                    f"--overwrite: {path} is not a run directory (no config.toml), and ascent "
                    "deletes only its own runs; choose another run.name or output_dir, or move "
                    "it away yourself"
                )
            return f"{path}: replaced (--overwrite)", None
        return f"{path}: a new run directory", None

    @classmethod
    def create(
        cls, cfg: AnyConfig, *, resume: Path | None = None, overwrite: bool = False
    ) -> RunDir:
        _, point = cls._examine(cfg, resume, overwrite)  # every refusal, nothing written
        if resume is not None:
            return cls._resume(Path(resume), cfg, point)
        path = Path(cfg.run.output_dir) / cfg.run.name
        if path.exists() and any(path.iterdir()):  # a run to replace (checked), or a lone lock
            lock(path)  # refused while another process runs it
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
        lock(path)
        run_dir = cls(path)
        write_text_atomic(run_dir.config_path, dump_config(cfg))
        return run_dir

    @classmethod
    def _resume(
        cls, path: Path, cfg: AnyConfig, point: tuple[Path | None, list[str]] | None = None
    ) -> RunDir:
        lock(path)  # refused while another process runs it
        ckpt, notes = point if point is not None else resume_point(path)
        if notes:
            print(f"note: {'; '.join(notes)}")
        if ckpt is None and not getattr(cfg, "stages", None):
            print(f"note: {path} has no checkpoint yet; starting it again from step 0")
            for partial in ("metrics.jsonl", "summary.json"):
                (path / partial).unlink(missing_ok=True)
            shutil.rmtree(path / "samples", ignore_errors=True)
        run_dir = cls(path, resume_from=ckpt, resuming=True)
        changes = resume_changes(path, cfg) if ckpt is not None else []
        if changes:
            print(f"note: {path} resumes from {ckpt.name} with {describe(changes)}")
            run_dir._keep_segment_config(ckpt.name, changes)
        write_text_atomic(run_dir.config_path, dump_config(cfg))
        return run_dir

    def _keep_segment_config(self, checkpoint: str, changes: list[Change]) -> None:
        """Before a resume with other settings replaces config.toml, keep the one the run
        had so far: config-history/segment-N.toml, N counting from 1."""
        history = self.path / CONFIG_HISTORY
        history.mkdir(exist_ok=True)
        n = 1 + sum(1 for _ in history.glob("segment-*.toml"))
        header = f"# the config of segment {n}; the next resumed from {checkpoint} with "
        text = header + describe(changes) + "\n" + self.config_path.read_text()
        write_text_atomic(history / f"segment-{n}.toml", text)

    def write_summary(self, summary: dict[str, Any]) -> Path:
        paths = {
            "run_dir": str(self.path),
            "config": str(self.config_path),
            "metrics": str(self.metrics_path),
            "checkpoints": str(self.checkpoints),
            "samples": str(self.samples_dir),
        }
        if (self.path / FINAL_MODEL).is_dir():
            paths["final_model"] = str(self.path / FINAL_MODEL)
        write_json_atomic(self.summary_path, {**summary, "paths": paths})
        return self.summary_path
