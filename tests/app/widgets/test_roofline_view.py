"""The roofline verdict kept with the reply (app/widgets/roofline_view.py, app/history/perf.py): the other processes'
CPU share is measured live only, so the verdict and that share are stored in the reply's ``PerfRecord`` and a
reopened conversation shows the verdict said live (issue 41: "machine busy" live, "overhead-bound" reopened)."""

from __future__ import annotations

from engine.bench import roofline
from tests.app._gui_fixtures import make_window, send_and_wait, settings, store  # noqa: F401 (fixtures)


class BusyMachine(roofline.CpuWatch):
    """The machine's load is the one input a test cannot set for real: spinning processes showed nothing when the
    warmed-up tiny model's reply took under CpuWatch's 50 ms floor. The share is what the real watch would say
    under two spinners on two cores; everything after it (the verdict, its storage, its reading back) is real."""

    def others_share(self) -> float | None:
        return 0.9


def test_a_busy_machine_verdict_is_stored_and_shown_again_when_reopened(make_window, qtbot):
    window = make_window(max_new_tokens=16)
    view = window.perf_panel.roofline
    qtbot.waitUntil(lambda: not view.busy(), timeout=120_000)
    view._watch = BusyMachine()  # other programs hold the cores while the reply decodes
    send_and_wait(qtbot, window, "Hello there")
    live = view.values["roofline_verdict"].text()
    assert live.startswith("machine busy (other programs used ")
    cid = window.current_conversation()
    record = window.controller.messages()[-1].perf
    assert record.roofline_verdict == "machine busy" and record.others_cpu_share >= roofline.BUSY_SHARE

    window.on_new_chat_triggered()
    assert view.values["roofline_verdict"].text() == "—"
    window.open_conversation(cid)  # read back from SQLite: the verdict said live, with its share
    reopened = window.controller.messages()[-1].perf
    assert reopened.roofline_verdict == "machine busy" and reopened.others_cpu_share == record.others_cpu_share
    assert view.values["roofline_verdict"].text() == live
