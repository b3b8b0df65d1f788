"""TrainContext: what this rank is. Mirrors ray.train.get_context() / ray.train.context."""

from traintl.train import _session


class TrainContext:
    """This rank's place in the job and the job's identity.

    Mirrors ray.train.context.TrainContext. A snapshot of the worker's context; safe to use
    from any thread.
    """

    def __init__(self, context):
        self._context = dict(context)

    def _int(self, key, default):
        value = self._context.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    def _str(self, key):
        value = self._context.get(key)
        return value if isinstance(value, str) else ""

    def get_world_rank(self):
        """Global rank of this worker, in [0, world_size)."""
        return self._int("world_rank", 0)

    def get_world_size(self):
        """Number of workers (ranks) in the job."""
        return self._int("world_size", 1)

    def get_local_rank(self):
        """Rank of this worker among those on its node."""
        return self._int("local_rank", 0)

    def get_local_world_size(self):
        """Number of workers of the job on this node."""
        return self._int("local_world_size", 1)

    def get_node_rank(self):
        """Index of this worker's node among the job's nodes."""
        return self._int("node_rank", 0)

    def get_trial_dir(self):
        """The job's results directory in storage (<storage_path>/<name>-<job_id>)."""
        return self._str("trial_dir")

    def get_attempt(self):
        """The attempt number: 1 for the first start, +1 for every restart."""
        return self._int("attempt", 1)

    def get_trial_name(self):
        """The job's name."""
        return self._str("job_name")

    def get_experiment_name(self):
        """The job's name (a traintl job is one experiment of one trial)."""
        return self._str("job_name")

    def get_trial_id(self):
        """The job's id."""
        return self._str("job_id")

    def get_metadata(self):
        """Ray's user metadata: traintl has none, so an empty dict."""
        return {}

    def __repr__(self):
        return (
            f"TrainContext(job={self.get_trial_name()!r}, id={self.get_trial_id()!r}, "
            f"attempt={self.get_attempt()}, rank={self.get_world_rank()}/"
            f"{self.get_world_size()})"
        )


def get_context():
    """This rank's TrainContext. Mirrors ray.train.get_context()."""
    return TrainContext(_session.context())
