"""Model files loaded without running code they carry, unless the user trusts the file.

- `.pt2` (torch.export): the archive is inspected first (`export_archive.untrusted_parts`:
  pickled entries, compiled code, shape expressions and guards that are not plain arithmetic);
  then torch loads it with every `torch.load` forced to weights only, so the sample inputs (and
  the weights of archives from torch 2.7) are read by torch's restricted unpickler.
- TorchScript: TorchScript's own unpickler resolves only TorchScript types and tensors, never a
  Python global (a `__reduce__` naming `os.system` is "Unknown type name"), but its code may call
  `torch.save`, which writes files when the model loads (`__setstate__`) or runs: refused.
- checkpoints (`torch.save(model)` in a .pt/.pth): read with `torch.load(weights_only=True)`;
  a whole pickled model needs full unpickling, which runs whatever the file says.

Anything that needs more is refused with one line naming `--allow-pickle` (SDK:
`allow_pickle=True`), with which torch loads the file as it would on its own. Corrupt and
truncated files give one line too: torch's tracebacks, warnings and log lines are kept quiet.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import torch

from agnitra.errors import WorkloadError, first_line
from agnitra.workloads.export_archive import ArchiveCorrupt, members, require_one_reading, untrusted_parts

TRUST_HINT = "pass --allow-pickle (SDK: allow_pickle=True) only if you trust where it came from"
FORCE_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
FORCE_FULL_UNPICKLE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
TORCHSCRIPT_WRITES_FILES = re.compile(r"\bsave\s*\(")
ZIP_READ_ERRORS = (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, zlib.error)


def needs_trust(path: Path, what: str) -> WorkloadError:
    return WorkloadError(f"{path} holds {what}, which would run code when loaded; {TRUST_HINT}")


def unreadable(path: Path, kind: str, fix: str, why: str) -> WorkloadError:
    return WorkloadError(f"{path} is not a readable {kind} ({why}); {fix}")


@contextlib.contextmanager
def quiet_library() -> Iterator[None]:
    """No warnings or log lines from the libraries while a file loads: its one-line error says it all."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(previous)


@contextlib.contextmanager
def weights_only_unpickling() -> Iterator[None]:
    """Every torch.load inside, including torch's own `weights_only=False` calls, reads weights only."""
    saved = {name: os.environ.get(name) for name in (FORCE_WEIGHTS_ONLY, FORCE_FULL_UNPICKLE)}
    os.environ[FORCE_WEIGHTS_ONLY] = "1"
    os.environ.pop(FORCE_FULL_UNPICKLE, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def open_zip(path: Path, kind: str, fix: str) -> zipfile.ZipFile:
    """The file as a zip archive, or one line saying it is not one (truncated, corrupt, another format)."""
    try:
        return zipfile.ZipFile(path)
    except ZIP_READ_ERRORS as exc:
        raise unreadable(path, kind, fix, "not a zip archive: truncated, or another format") from exc


def is_damaged_zip(path: Path) -> bool:
    """Starts like a zip archive but has no readable directory at its end: cut short in a copy."""
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04" and not zipfile.is_zipfile(path)


def damage(archive: zipfile.ZipFile) -> str | None:
    """The first entry whose bytes fail their checksum, if any (a corrupt download or a flipped byte)."""
    try:
        bad = archive.testzip()
    except ZIP_READ_ERRORS as exc:
        return first_line(exc)
    return f"{bad} fails its checksum" if bad else None


EXPORT_FIX = "re-save it with torch.export.save"


def load_export_archive(path: Path, allow_pickle: bool = False) -> torch.export.ExportedProgram:
    """torch.export.load, after checking the archive holds no code (unless the file is trusted)."""
    with open_zip(path, "torch.export archive", EXPORT_FIX) as archive:
        if not allow_pickle:
            _refuse_untrusted_export(path, archive)
        guard = contextlib.nullcontext() if allow_pickle else weights_only_unpickling()
        with quiet_library(), guard:
            try:
                return torch.export.load(str(path))
            except pickle.UnpicklingError as exc:
                raise needs_trust(path, "pickled Python objects torch's weights-only loader refuses") from exc
            except Exception as exc:  # noqa: BLE001 - torch raises anything on a damaged archive
                raise unreadable(path, "torch.export archive", EXPORT_FIX, damage(archive) or _export_reason(exc)) from exc


def _export_reason(exc: Exception) -> str:
    """torch's own words, except its 'check the warnings above' (they are kept quiet)."""
    text = first_line(exc)
    return "damaged, or not written by torch.export.save" if "warnings above" in text else text


def _refuse_untrusted_export(path: Path, archive: zipfile.ZipFile) -> None:
    try:
        found = untrusted_parts(archive)
    except ArchiveCorrupt as exc:
        raise unreadable(path, "torch.export archive", EXPORT_FIX, damage(archive) or str(exc)) from exc
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise needs_trust(path, found[0] + more)


def is_torchscript(archive: zipfile.ZipFile) -> bool:
    """TorchScript archives hold code/ and constants.pkl; torch.save's zips hold data.pkl alone."""
    paths = [path for path, _ in members(archive)]
    return "constants.pkl" in paths and any(p.startswith("code/") for p in paths)


TORCHSCRIPT_FIX = "save it with torch.jit.save"


def load_torchscript(path: Path, archive: zipfile.ZipFile, device: torch.device, allow_pickle: bool = False) -> torch.nn.Module:
    if not allow_pickle:
        try:
            require_one_reading(archive)
            _refuse_file_writing_code(path, archive)
        except ArchiveCorrupt as exc:
            raise unreadable(path, "TorchScript archive", TORCHSCRIPT_FIX, str(exc)) from exc
        except ZIP_READ_ERRORS as exc:
            raise unreadable(path, "TorchScript archive", TORCHSCRIPT_FIX, first_line(exc)) from exc
    with quiet_library():
        try:
            return torch.jit.load(str(path), map_location=device)
        except Exception as exc:  # noqa: BLE001 - TorchScript raises RuntimeError with its own text
            raise unreadable(path, "TorchScript archive", TORCHSCRIPT_FIX, damage(archive) or first_line(exc)) from exc


def _refuse_file_writing_code(path: Path, archive: zipfile.ZipFile) -> None:
    for inner, name in members(archive):
        if inner.startswith("code/") and inner.endswith(".py") and TORCHSCRIPT_WRITES_FILES.search(archive.read(name).decode("utf-8", "replace")):
            raise WorkloadError(f"{path}'s TorchScript code calls save() ({inner}), which writes files when the model loads or runs; {TRUST_HINT}")


CHECKPOINT_FIX = "save the model with torch.jit.save or torch.export.save, or build it in file.py:factory"


def load_checkpoint(path: Path, device: torch.device, allow_pickle: bool = False) -> torch.nn.Module:
    """A model saved whole with torch.save: weights-only first; the whole model needs full unpickling."""
    if not (zipfile.is_zipfile(path) or _starts_like_pickle(path)):
        raise unreadable(path, "TorchScript archive or torch.save checkpoint", CHECKPOINT_FIX, "neither a zip archive nor a pickle")
    with quiet_library():
        try:
            loaded = torch.load(str(path), map_location=device, weights_only=not allow_pickle)
        except pickle.UnpicklingError as exc:
            raise needs_trust(path, "pickled Python objects (a model saved whole with torch.save)") from exc
        except Exception as exc:  # noqa: BLE001 - a damaged pickle raises anything
            raise unreadable(path, "TorchScript archive or torch.save checkpoint", CHECKPOINT_FIX, first_line(exc)) from exc
    if not isinstance(loaded, torch.nn.Module):
        raise WorkloadError(f"{path} holds {type(loaded).__name__} (weights, not a model); build the model in file.py:factory and load these weights there with torch.load(..., weights_only=True)")
    return loaded


def _starts_like_pickle(path: Path) -> bool:
    """Pickle protocols 2 and later (every torch.save) begin with the PROTO opcode, 0x80."""
    with open(path, "rb") as f:
        return f.read(1) == b"\x80"
