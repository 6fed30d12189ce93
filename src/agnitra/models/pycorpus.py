"""Real text every machine here has offline: the Python standard library's own source.

`tinylm-py` is trained on it and verified on it. The corpus is versioned: a fixed list of
modules for training and a disjoint list held out for evaluation, read from the running
interpreter's `Lib/` (a module missing from this Python's library is skipped, and the
fingerprint of what was read is recorded beside every figure). Tokens are bytes (vocabulary 256):
no tokenizer to ship, train or download.
"""

from __future__ import annotations

import hashlib
import math
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

CORPUS_VERSION = "pycorpus/1"
VOCAB_SIZE = 256  # byte-level tokens

# held out for evaluation: single-file modules present from Python 3.11 on
HELDOUT_MODULES = (
    "textwrap", "statistics", "shlex", "pprint", "string", "bisect", "glob", "fnmatch",
    "colorsys", "graphlib", "numbers", "reprlib", "sched",
)

# the small model's training set: single-file modules, none held out
TRAIN_MODULES = (
    "argparse", "ast", "base64", "bdb", "calendar", "cmd", "code", "codecs", "codeop", "configparser",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "difflib", "dis", "enum", "filecmp",
    "fileinput", "fractions", "ftplib", "functools", "genericpath", "getopt", "gettext", "gzip",
    "hashlib", "heapq", "hmac", "imaplib", "inspect", "ipaddress", "keyword", "linecache", "locale",
    "lzma", "mailbox", "mimetypes", "netrc", "ntpath", "opcode", "operator", "optparse", "os",
    "pathlib", "pickle", "pkgutil", "platform", "plistlib", "poplib", "posixpath", "queue",
    "quopri", "random", "selectors", "shelve", "shutil", "signal", "site", "smtplib", "socket",
    "socketserver", "stringprep", "struct", "subprocess", "symtable", "tarfile", "tempfile",
    "threading", "timeit", "token", "tokenize", "trace", "traceback", "tracemalloc", "types",
    "typing", "uuid", "warnings", "wave", "weakref", "zipapp",
)

TEST_DIRS = ("test", "tests", "idle_test")  # the large model's rule leaves test suites out


@dataclass(frozen=True)
class Corpus:
    """One split's bytes as tokens, and what was read."""

    split: str  # train | heldout
    tokens: torch.Tensor  # uint8 [N]
    modules: tuple[str, ...]
    missing: tuple[str, ...]
    fingerprint: str  # sha256 of the bytes, first 16 hex digits

    def describe(self) -> dict:
        return {"version": CORPUS_VERSION, "split": self.split, "bytes": int(self.tokens.numel()), "modules": len(self.modules),
                "missing": list(self.missing), "fingerprint": self.fingerprint, "python": sys.version.split()[0]}


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_corpus(split: str, rule: str = "list") -> Corpus:
    """`split`: train or heldout. `rule`: "list" (the fixed training list) or "all" (every module
    of Lib/ except the held-out ones and test suites: the large model's training set)."""
    root = stdlib_dir()
    if split == "heldout":
        paths = {name: root / f"{name}.py" for name in HELDOUT_MODULES}
    elif rule == "list":
        paths = {name: root / f"{name}.py" for name in TRAIN_MODULES}
    else:
        held = {f"{name}.py" for name in HELDOUT_MODULES}
        skipped_dirs = {*TEST_DIRS, "site-packages"}
        files = sorted(p for p in root.rglob("*.py") if not skipped_dirs & set(p.relative_to(root).parts[:-1]) and p.relative_to(root).as_posix() not in held)
        paths = {p.relative_to(root).as_posix(): p for p in files}
    chunks, read, missing = [], [], []
    for name, path in paths.items():
        if path.is_file():
            chunks.append(path.read_bytes() + b"\n")
            read.append(name)
        else:
            missing.append(name)
    data = b"".join(chunks)
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return Corpus(split, tokens, tuple(read), tuple(missing), hashlib.sha256(data).hexdigest()[:16])


def window(tokens: torch.Tensor, index: int, length: int, count: int) -> torch.Tensor:
    """The `index`-th of `count` windows of `length` tokens spread evenly over `tokens`, as int64."""
    span = tokens.numel() - length
    if span < 0:
        raise ValueError(f"the corpus has {tokens.numel()} tokens, fewer than a window of {length}")
    start = (index % count) * span // max(1, count - 1) if count > 1 else 0
    return tokens[start : start + length].long()


def unigram_perplexity(train: torch.Tensor, heldout: torch.Tensor) -> float:
    """Perplexity on `heldout` of the byte-frequency model of `train` (add-one smoothing): the
    floor any model that learned something must be far below."""
    counts = torch.bincount(train.long(), minlength=VOCAB_SIZE).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return math.exp(-log_p[heldout.long()].mean().item())
