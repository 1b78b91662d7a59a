"""One Miaohui per data folder: a second start brings the running window to the front and exits.

Owns the guard: a ``QLockFile`` in the data folder says which process runs the app on it, and a
``QLocalServer`` named after the data folder (and the user) takes "show your window" requests from later
starts. The lock, not the server, decides who runs: two starts at the same moment cannot both win, and
the winner removes the socket file a crashed instance left behind before it listens (a crashed owner's
lock is stale by its dead process id, and ``QLockFile`` takes it over). Different ``MIAOHUI_HOME`` folders
are different instances.

The wire is one request line ``activate`` answered by ``ok``; anything else is dropped unanswered (only
this user's processes can connect: ``UserAccessOption``). Scripted runs (``--self-test``,
``--screenshot``) use throwaway settings and history, so ``app.main`` neither takes nor checks the guard
for them: they run beside an open window and never block one. What "show" means is the window's
business (``MainWindow.bring_to_front``); this module only reports the request.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import time
from pathlib import Path

from PySide6.QtCore import QDeadlineTimer, QLockFile, QObject, Signal, Slot
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

LOCK_NAME = "miaohui.lock"
REQUEST, ANSWER = b"activate\n", b"ok\n"
CONNECT_WAIT_MS = 3000  # the owner may have taken the lock but not be listening yet (a few ms, more on a busy CPU)
ANSWER_WAIT_MS = 5000  # the owner answers from its event loop, which starts once its window is built


def server_name(data_dir: Path) -> str:
    """The local socket name for ``data_dir``: short (Unix socket paths are limited), one per user and folder."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment: the folder alone still separates instances
        user = ""
    digest = hashlib.sha256(f"{user}\0{Path(data_dir).resolve()}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"miaohui-{digest[:20]}"


class SingleInstance(QObject):
    """The guard for one data folder. ``acquire()`` once at start, ``release()`` at exit.

    Signals:
        activation_requested(): a later start on the same data folder asked this instance to show its window.
    """

    activation_requested = Signal()

    def __init__(self, data_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.data_dir = Path(data_dir)
        self.name = server_name(self.data_dir)
        self.lock_path = self.data_dir / LOCK_NAME
        self._lock = QLockFile(str(self.lock_path))
        self._lock.setStaleLockTime(0)  # stale only when its owner is gone, never by age: the app runs for days
        self._server: QLocalServer | None = None

    def acquire(self) -> bool:
        """True: this process is the folder's instance (and listens for activations). False: another runs."""
        if not self._lock.tryLock(0):
            if self._lock.error() == QLockFile.LockError.LockFailedError:
                return False
            # The lock file cannot be made (a read-only folder): run unguarded rather than not at all; the
            # history store keeps two processes on one file safe by itself.
            log.warning("cannot create %s (%s); running without the single-instance guard", self.lock_path,
                        self._lock.error().name)
            return True
        QLocalServer.removeServer(self.name)  # a crashed owner's socket file: we hold the lock, it is nobody's
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        server.newConnection.connect(self.on_server_new_connection)
        if server.listen(self.name):
            self._server = server
        else:  # the app still runs; a second start just cannot bring this window up
            log.warning("cannot listen on %s: %s", self.name, server.errorString())
        return True

    def owner_pid(self) -> int | None:
        """Process id written in the lock file by the running instance (None if unreadable)."""
        info = self._lock.getLockInfo()  # (pid, hostname, appname) in PySide6
        pid = info[0] if isinstance(info, tuple) and info else None
        return pid if isinstance(pid, int) and pid > 0 else None

    def activate_running(self) -> bool:
        """Ask the running instance to show its window. True once the request was delivered (connected and
        written); the answer is waited for briefly, and a late one still brings the window up."""
        socket = QLocalSocket()
        deadline = QDeadlineTimer(CONNECT_WAIT_MS)
        while True:
            socket.connectToServer(self.name)
            if socket.waitForConnected(500):
                break
            if deadline.hasExpired():
                return False
            socket.abort()
            time.sleep(0.1)  # a refused connect returns at once: do not spin
        socket.write(REQUEST)
        delivered = socket.waitForBytesWritten(1000)
        if delivered and socket.waitForReadyRead(ANSWER_WAIT_MS) and socket.readLine(16).data() == ANSWER:
            log.info("the running instance brought its window to the front")
        socket.disconnectFromServer()
        return delivered

    def hand_over(self) -> tuple[bool, str]:
        """For a start that lost ``acquire()``: ask the running instance for its window. Returns (delivered,
        one line for the user); ``app.main`` exits 0 when delivered, 1 when the owner does not answer."""
        if self.activate_running():
            return True, f"Miaohui is already running with the data folder {self.data_dir}; its window was brought up"
        pid = self.owner_pid()
        owner = f" (process {pid})" if pid is not None else ""
        return False, (f"another Miaohui{owner} holds {self.lock_path} but does not answer; close it, "
                       "or delete that file if no Miaohui is running")

    def release(self) -> None:
        """Stop listening and unlock (also right before ``os._exit``: the next start need not wait for staleness)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._lock.isLocked():
            self._lock.unlock()

    @Slot()
    def on_server_new_connection(self) -> None:
        while self._server is not None and (connection := self._server.nextPendingConnection()) is not None:
            connection.disconnected.connect(connection.deleteLater)
            connection.readyRead.connect(self.on_connection_ready_read)
            if connection.canReadLine():  # the request may have arrived before the connection was taken
                self._answer(connection)

    @Slot()
    def on_connection_ready_read(self) -> None:
        connection = self.sender()
        if isinstance(connection, QLocalSocket):
            self._answer(connection)

    def _answer(self, connection: QLocalSocket) -> None:
        if not connection.canReadLine():
            if connection.bytesAvailable() > len(REQUEST):  # no line where a short one belongs: not ours
                connection.abort()
            return
        if connection.readLine(len(REQUEST) + 1).data() != REQUEST:
            connection.abort()
            return
        connection.write(ANSWER)
        connection.flush()
        connection.disconnectFromServer()
        self.activation_requested.emit()
