"""traintl: run Python training functions on a traintl cluster.

The SDK mirrors Ray Train's (``from ray import train``)::

    from traintl import train

    def train_func(config):
        ctx = train.get_context()
        ...
        train.report({"loss": loss}, checkpoint=train.Checkpoint.from_directory(tmp))

A job names the function by its entry point, ``{"python": "module:function",
"working_dir": "dir"}``; a program started by a ``{"command": [...]}`` entry point may use
the same API.
"""

from traintl import train

__all__ = ["train"]
