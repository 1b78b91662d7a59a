"""A Hub that cannot be reached fails at once with one human line, through the real huggingface_hub client: a
closed port on 127.0.0.1, a name that does not resolve (``.invalid`` never does), a host that never answers the
connect; in the library, the CLI (a real process) and with the endpoint from ``HF_ENDPOINT``. Errors once a server
answers are unchanged. And the hint for downloads that are off names the place the switch really is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from engine.__main__ import main
from engine.library import access, hub
from engine.library.access import HubUnreachableError, Unreachable
from tests.engine.library.conftest import TINY
from tests.helpers.network import closed_port_url

ROOT = Path(__file__).resolve().parents[3]
UNRESOLVABLE = "http://nonexistent.invalid"
GIVES_UP_WITHIN_S = 8.0  # huggingface_hub's own retries took 23 s; a bound with a wide margin for a busy machine


def _fails_fast(call) -> HubUnreachableError:
    start = time.monotonic()
    with pytest.raises(HubUnreachableError) as info:
        call()
    assert time.monotonic() - start < GIVES_UP_WITHIN_S
    assert "\n" not in str(info.value) and "ConnectError" not in str(info.value) and "Errno" not in str(info.value)
    return info.value


def test_a_closed_port_is_refused_at_once(caplog):
    endpoint = closed_port_url()
    for call in (lambda: hub.search("smol", allow_downloads=True, endpoint=endpoint),
                 lambda: hub.model_page(TINY, allow_downloads=True, endpoint=endpoint),
                 lambda: hub.plan_download(TINY, allow_downloads=True, endpoint=endpoint)):
        error = _fails_fast(call)
        assert error.reason is Unreachable.REFUSED and error.endpoint == endpoint
        assert str(error) == f"cannot reach {endpoint}: nothing accepts connections there (connection refused)"
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]  # no back-off was started


def test_a_name_that_does_not_resolve_says_so_also_from_hf_endpoint(monkeypatch):
    error = _fails_fast(lambda: hub.search("smol", allow_downloads=True, endpoint=UNRESOLVABLE))
    assert error.reason is Unreachable.NO_NAME
    assert str(error) == f"cannot reach {UNRESOLVABLE}: no network or the name does not resolve"
    monkeypatch.setenv("HF_ENDPOINT", UNRESOLVABLE)
    assert _fails_fast(lambda: hub.search("smol", allow_downloads=True)).reason is Unreachable.NO_NAME


def test_the_default_hub_is_named_as_hugging_face():
    error = HubUnreachableError(access.DEFAULT_ENDPOINT, Unreachable.NO_NAME)
    assert str(error) == "cannot reach Hugging Face: no network or the name does not resolve"


def test_a_host_that_never_answers_the_connect_gives_up_after_the_connect_timeout(monkeypatch):
    # A listening socket whose accept queue is full: Linux drops further SYNs, so a connect hangs like one to a
    # host behind a silent firewall.
    if not sys.platform.startswith("linux"):
        pytest.skip("relies on Linux dropping SYNs to a full accept queue")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    for _ in range(4):  # enough to fill a backlog of 0 (Linux accepts backlog + 1)
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(server.getsockname())
        fillers.append(filler)
    time.sleep(0.2)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)  # huggingface_hub's own option bounds connecting
    try:
        endpoint = "http://127.0.0.1:%d" % server.getsockname()[1]
        error = _fails_fast(lambda: hub.search("smol", allow_downloads=True, endpoint=endpoint))
        assert error.reason is Unreachable.TIMEOUT
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def test_a_server_that_answers_still_reads_as_before(fake_hub, only_fake_hub):
    assert [h.repo for h in hub.search("tiny-chat", allow_downloads=True, endpoint=fake_hub.url).hits]
    with pytest.raises(Exception) as info:
        hub.model_page("nobody/nothing", allow_downloads=True, endpoint=fake_hub.url)
    assert not isinstance(info.value, HubUnreachableError)


def test_the_cli_says_one_line_at_once_without_a_network():
    env = {**os.environ, "HF_ENDPOINT": UNRESOLVABLE}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "engine", "models", "search", "smol", "--allow-downloads"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: cannot reach {UNRESOLVABLE}: no network or the name does not resolve\n"
    assert took < 60  # the process starts in seconds; it used to sit 23 s more in retries


def test_the_hint_for_downloads_that_are_off_names_the_models_window(home, no_network, capsys):
    assert main(["models", "search", "smol"]) == 2
    err = capsys.readouterr().err
    assert "Chat → Models… → Allow downloads from Hugging Face" in err and "Settings" not in err
    assert main(["models", "search", "smol", "--json"]) == 2
    err = capsys.readouterr().err
    assert "Models…" in err and "Settings" not in err
