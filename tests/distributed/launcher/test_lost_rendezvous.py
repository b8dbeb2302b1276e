"""A rendezvous lost under a running job is one line and exit 1, never "the launcher itself failed".

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_lost_rendezvous.py -q``
In-process: the launcher's job is replaced by one that raises torch's rendezvous errors as a
c10d agent does when node 0 vanishes or the network to it stays cut past ``read_timeout``
(seen for real on the namespace harness with torchrun's 60 s: a traceback and "the launcher
itself failed"). The c10d default read_timeout is 600 s now, the static rendezvous's wait:
tests/distributed/launcher/test_netns_partition.py rides out a 120 s cut with it.
"""

from __future__ import annotations

import pytest
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousTimeoutError,
)

from neural_arch.distributed.launcher import launch


@pytest.mark.parametrize(
    "error, says",
    [
        (RendezvousConnectionError("The connection to the C10d store has failed."), "lost the rendezvous"),
        (RendezvousClosedError(), "lost the rendezvous"),
        (RendezvousTimeoutError("join timed out"), "not every node joined in time"),
    ],
)
def test_a_rendezvous_error_under_the_job_is_one_line_and_exit_1(error, says, tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")

    def lost(self, *args):
        raise error

    monkeypatch.setattr(launch.DistributedLauncher, "_launch", lost)
    code = launch.main(["--nproc-per-node", "1", str(script)])
    err = capsys.readouterr().err
    assert code == 1
    assert says in err
    assert "Traceback" not in err and "itself failed" not in err
    assert len(err.strip().splitlines()) == 1, err
