"""Checkpoint: a directory of files. Mirrors ray.train.Checkpoint (local directories)."""

import contextlib
import os
import shutil
import tempfile


class Checkpoint:
    """A checkpoint: a directory of files on this node.

    Reporting one (train.report(..., checkpoint=...)) makes the worker copy its files into
    storage before report() returns; the caller may delete the directory afterwards. A
    restored one (train.get_checkpoint()) is the committed checkpoint itself: read it,
    never write to it. Mirrors ray.train.Checkpoint for local paths.
    """

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))

    @classmethod
    def from_directory(cls, path):
        """A checkpoint of the directory `path` (not checked here: report() fails when it is
        not a readable directory)."""
        return cls(path)

    @contextlib.contextmanager
    def as_directory(self):
        """Yields the checkpoint's local directory (read-only; no copy is made)."""
        yield self.path

    def to_directory(self, path=None):
        """Copies the checkpoint's files into `path` (a new temporary directory when None)
        and returns that path."""
        if path is None:
            path = tempfile.mkdtemp(prefix="traintl-checkpoint-")
        path = os.fspath(path)
        shutil.copytree(self.path, path, dirs_exist_ok=True)
        return path

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self):
        return hash(self.path)

    def __repr__(self):
        return f"Checkpoint(path={self.path!r})"
