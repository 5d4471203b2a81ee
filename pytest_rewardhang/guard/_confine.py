"""What a guarded process may reach besides its processes and memory: its temporary files,
its shared memory and IPC, the network, and every other process.

Made in the parent before the fork (a :class:`Plan`, part of the process's box: see
:mod:`._box`), entered by the child once it holds nothing but its own descriptors, before the
call:

- a private ``/dev/shm`` where the caller may make a mount namespace (root): a tmpfs of the
  call's own there, gone with the call's last process, so nothing it leaves there outlives it
  (and, with a memory limit, what it holds is charged to the call);
- a private temporary folder: ``TMPDIR`` and :mod:`tempfile` point at a fresh folder, gone
  after the call with whatever it holds: ``/dev/shm/tmp`` in that tmpfs where there is one
  (nothing for the caller to make or remove: a folder made and removed on a disk shared with
  busy neighbours took up to 3 ms a call), else one made in the caller's temporary folder and
  removed after the call;
- a private IPC namespace (root): SysV shared memory, semaphores and message queues of its
  own, gone with it;
- no network (``network=False``): a network namespace of its own, loopback only;
- an identity of its own (``unprivileged=True``, a caller running as root): the call runs as a
  uid no other guarded process holds while it runs (:class:`Uids`), without groups or
  capabilities, and ``PR_SET_NO_NEW_PRIVS`` keeps it from gaining any back, so it cannot
  signal, trace, read the memory of or re-limit the caller, a pool's zygote, its own worker
  (isolated), other workers or other calls, nor write their ``/proc`` files. Opt-in: such a
  call can no longer read files only root may read, nor make the cgroups a guard nested in it
  would use.

An isolating worker (``Pool(isolate=True)``) enters the mount and network namespaces once,
and leaves the IPC namespace and the identity to each of its items (:meth:`Plan.item`): it
stays root, out of its items' reach, and gives each item a uid of its own.

What needs the kernel's permission (a namespace, the change of user) is probed once per
process in a throwaway child: a child asked to enter what the probe allowed and that cannot is
reported as crashed, never run unconfined.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
from dataclasses import dataclass, replace

from . import _libc, _procfs
from ._outcome import Confinement
from ._state import STATE, UidBlock

log = logging.getLogger("pytest_rewardhang.guard")

#: The first uid handed to guarded processes (``unprivileged=True``): each process that forks
#: guarded processes hands out uids from a block of its own, :data:`UID_BLOCK` uids at
#: ``UID_BASE + UID_BLOCK * pid`` (its pid as ``/proc`` names it: two live processes never
#: share one), so no two guarded processes of a machine's callers hold one uid at once. 2^31 up:
#: above the ranges user databases and container tools hand out (systemd's dynamic users,
#: ``/etc/subuid``'s 100000 up) and below the kernel's ``(uid_t) -1``.
UID_BASE = 1 << 31
#: The uids of one process's block: how many guarded processes it may run at once with an
#: identity of their own. ``PID_MAX_LIMIT`` (2^22) blocks of 2^9 fill the 2^31 uids above
#: :data:`UID_BASE`.
UID_BLOCK = 1 << 9
_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_PRIVATE = 2, 4, 8, 4096, 1 << 18
#: ``mount_setattr(2)``: its number (the same on every architecture since Linux 5.12), and its
#: flags.
_SYS_MOUNT_SETATTR = 442
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
#: What stays writable in a sealed mount namespace (see _private_shm).
_WRITABLE = (b"/proc", b"/sys/fs/cgroup")
#: The world-writable folders a sealed call has as its own (see _private_tmp).
_TMP_FOLDERS = (b"/tmp", b"/var/tmp")
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
_SHM = b"/dev/shm"
_SHM_TMP = b"/dev/shm/tmp"
#: What an isolating worker leaves to each item (see :meth:`Plan.item`).
_PER_ITEM = frozenset({Confinement.PRIVATE_IPC, Confinement.UNPRIVILEGED})

#: What each confinement needs when it is missing, said once in the warning.
_MISSING = {
    Confinement.MEMORY_MAX: (
        "memory_mb bounds each process alone, not the call's processes together "
        "(no cgroup memory controller could be used)"
    ),
    Confinement.PIDS_MAX: (
        "the call's processes are not counted (no cgroup pids controller could be used)"
    ),
    Confinement.PRIVATE_TMP: "the call has no temporary folder of its own",
    Confinement.PRIVATE_SHM: (
        "what the call leaves in /dev/shm outlives it (a mount namespace needs root)"
    ),
    Confinement.SEALED: (
        "unprivileged=True: what the call writes to world-writable folders (/tmp, /var/tmp) "
        "outlives it and is read by other calls (no mount_setattr, Linux 5.12, or no mount "
        "namespace)"
    ),
    Confinement.PRIVATE_IPC: (
        "the SysV shared memory and queues the call makes outlive it and are seen by other "
        "calls (an IPC namespace needs root)"
    ),
    Confinement.NO_NETWORK: "network=False: the call has the network (no network namespace)",
    Confinement.UNPRIVILEGED: (
        "unprivileged=True: the call runs as the caller's user (not root), who it can "
        "signal, as can every other call"
    ),
}


class Uids:
    """The uids this process hands to the guarded processes it forks, one each while it runs.

    One per process, in its state (:func:`uids`). A forked child has a block of its own
    (its pid's), taken afresh the first time it asks; the lock too, as a thread of the parent's
    may have held it at the fork. Handed out in turn, not lowest first: a uid given back is
    taken again as late as can be, after whatever of its last holder was still exiting.

    Given back is not gone: a process its holder left running (where nothing contains the
    call whole, a double fork past the subreaper), or one an earlier process of the same pid
    left, still runs as it, and would act on the next holder. So at the start of each round
    through the block, one look through ``/proc`` finds the uids some process still runs as,
    and the round passes them over (a few ms per 512 uids handed out).
    """

    def __init__(self) -> None:
        self.pid = 0
        self.base = 0
        self.taken: set[int] = set()
        #: The slots some process ran as at the start of this round; None: not looked yet.
        self.busy: set[int] | None = None
        self.next = 0
        self.lock = threading.Lock()

    def take(self) -> int | None:
        """A uid no process runs as (none this one forked holds it, nor did any process at
        the start of the round); None if the block is used up."""
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.base = UID_BASE + UID_BLOCK * _procfs.own_pid()
            self.taken = set()
            self.busy = None
            self.lock = threading.Lock()
        with self.lock:
            for step in range(UID_BLOCK):
                slot = (self.next + step) % UID_BLOCK
                if self.busy is None or slot == 0:  # a new round
                    self.busy = self._running()
                uid = self.base + slot
                if slot not in self.taken and slot not in self.busy and uid < (1 << 32) - 1:
                    self.taken.add(slot)
                    self.next = (slot + 1) % UID_BLOCK
                    return uid
        return None

    def _running(self) -> set[int]:
        """The slots of the block some process runs as now."""
        found = set()
        with contextlib.suppress(OSError):
            for name in os.listdir("/proc"):
                if name.isdigit():
                    uid = _procfs.real_uid(int(name))
                    if uid is not None and 0 <= uid - self.base < UID_BLOCK:
                        found.add(uid - self.base)
        return found

    def give(self, uid: int) -> None:
        """``uid``'s holder is gone: it may be handed out again."""
        if self.pid == os.getpid():
            with self.lock:
                self.taken.discard(uid - self.base)


def uids() -> UidBlock:
    """This process's uids (see :class:`Uids`), made when first needed."""
    state = STATE
    if state.uids is None:
        state.uids = Uids()
    return state.uids


def _call(name: str, *args: object) -> bool:
    libc = _libc.libc()
    if libc is None:
        return False
    return bool(getattr(libc, name)(*args) == 0)


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]


def _mount_attr(path: bytes, set_: int = 0, clear: int = 0, propagation: int = 0) -> bool:
    """``mount_setattr`` of every mount at and below ``path`` (Linux 5.12 on)."""
    attr = _MountAttr(set_, clear, propagation, 0)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    flags = ctypes.c_uint(_AT_RECURSIVE)
    return _call("syscall", _SYS_MOUNT_SETATTR, _AT_FDCWD, path, flags, ctypes.byref(attr), size)


def _private_shm(size_mb: float | None, sealed: bool = False) -> bool:  # pragma: no cover
    """A mount namespace whose ``/dev/shm`` is a fresh tmpfs; the caller's is untouched (made
    private first, so the new mount does not propagate back to it). ``sealed``: every other
    mount read-only first, but ``/proc`` and the cgroup file systems, which the guard's own
    processes write (and whose files of others an unprivileged uid may not)."""
    options = b"mode=1777" + (b",size=%dm" % max(int(size_mb), 1) if size_mb else b"")
    if not _call("unshare", _CLONE_NEWNS):
        return False
    if sealed:
        if not _mount_attr(b"/", set_=_MOUNT_ATTR_RDONLY, propagation=_MS_PRIVATE):
            return False
        for writable in _WRITABLE:
            if os.path.isdir(writable) and not _mount_attr(writable, clear=_MOUNT_ATTR_RDONLY):
                return False
        if not _private_proc():
            return False
    return _call("mount", None, _SHM, None, _MS_PRIVATE, None) and _call(
        "mount", b"tmpfs", _SHM, b"tmpfs", _MS_NOSUID | _MS_NODEV, options
    )


def _private_proc() -> bool:  # pragma: no cover - child only
    """In a sealed mount namespace: a ``/proc`` of its own that lists only the processes the
    call may trace (``hidepid=invisible``, an option of this mount alone since Linux 5.8, which
    ``mount_setattr``'s 5.12 implies): no other call's command line or status. Root (a zygote,
    an isolating worker) still sees every process."""
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    return _call("mount", b"proc", b"/proc", b"proc", flags, b"hidepid=invisible")


def _private_tmp() -> bool:  # pragma: no cover - child only
    """In a sealed mount namespace: ``/tmp`` and ``/var/tmp`` are the call's own
    ``/dev/shm/tmp``, where a program that names them finds room, of its own."""
    return all(
        _call("mount", _SHM_TMP, folder, None, _MS_BIND, None)
        for folder in _TMP_FOLDERS
        if os.path.isdir(folder) and not os.path.islink(folder)
    )


def _private_ipc() -> bool:  # pragma: no cover - child only
    """An IPC namespace of the process's own."""
    return _call("unshare", _CLONE_NEWIPC)


def _no_network() -> bool:  # pragma: no cover - child only
    """A network namespace of the call's own, its loopback up: nothing but itself to reach."""
    if not _call("unshare", _CLONE_NEWNET):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
    return True


def _unprivileged(uid: int) -> bool:  # pragma: no cover - child only
    """``uid``, without groups, capabilities (dropped with the uid) or a way back."""
    if not _call("prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
        return False
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # The change of uid made it not dumpable: its own /proc files root's, itself and its
    # children hidden from one another in a sealed /proc (hidepid), which the guard's own
    # walks of a call's processes read. Its uid is its own: no other process shares it.
    if not _call("prctl", _PR_SET_DUMPABLE, 1, 0, 0, 0):
        return False
    # What root was permitted, a guard nested in the call is not: probed again there.
    STATE.permitted.clear()
    return os.getresuid() == (uid, uid, uid) and os.getresgid() == (uid, uid, uid)


def permitted(confinement: Confinement) -> bool:
    """Whether the kernel lets a child here enter ``confinement`` (probed once, forked)."""
    permitted = STATE.permitted
    if confinement not in permitted:
        permitted[confinement] = _probe(confinement)
    return permitted[confinement]


def _probe(confinement: Confinement) -> bool:
    if _libc.libc() is None:
        return False
    if confinement is Confinement.UNPRIVILEGED and os.geteuid() != 0:
        return False
    enter = {
        Confinement.PRIVATE_SHM: lambda: _private_shm(1),
        Confinement.SEALED: lambda: _private_shm(1, sealed=True),
        Confinement.PRIVATE_IPC: _private_ipc,
        Confinement.NO_NETWORK: _no_network,
        Confinement.UNPRIVILEGED: lambda: _unprivileged(UID_BASE - 1),
    }[confinement]
    return _libc.probe_in_child(enter)


@dataclass
class Plan:
    """What one guarded process enters after its fork, and what of it is removed after it."""

    #: What applies (see :class:`Confinement`).
    applied: frozenset[Confinement]
    #: The call's private temporary folder made by the caller (where the call has no tmpfs
    #: of its own to make it in), None if it needs none or none could be made.
    tmpdir: str | None
    #: The size of its private ``/dev/shm``, in MiB (None: the kernel's default).
    shm_mb: float | None = None
    #: The uid it runs as (:attr:`Confinement.UNPRIVILEGED`), given back by :meth:`close`.
    uid: int | None = None
    #: An isolating worker's: the IPC namespace and the identity are its items' to enter
    #: (:meth:`item`), not its own.
    apart: bool = False

    @classmethod
    def make(
        cls, memory_mb: float | None, network: bool, unprivileged: bool, apart: bool = False
    ) -> Plan:
        """Before the fork: what the call asked for that the kernel permits. ``apart``: an
        isolating worker's (see :attr:`apart`)."""
        asked = {Confinement.PRIVATE_SHM, Confinement.PRIVATE_IPC}
        if not network:
            asked.add(Confinement.NO_NETWORK)
        if unprivileged:
            asked |= {Confinement.UNPRIVILEGED, Confinement.SEALED}
        applied = {confinement for confinement in asked if permitted(confinement)}
        if Confinement.PRIVATE_SHM not in applied:  # sealed around its own tmpfs, or not
            applied.discard(Confinement.SEALED)
        # No uid free (a block's worth of calls at once, or held by what calls left running):
        # the call is not made (see enter), rather than made as the caller.
        uid = uids().take() if Confinement.UNPRIVILEGED in applied and not apart else None
        tmpdir = None
        if Confinement.PRIVATE_SHM not in applied:  # else the child makes it in its tmpfs
            tmpdir = _caller_tmpdir(Confinement.UNPRIVILEGED in applied, uid)
        if Confinement.PRIVATE_SHM in applied or tmpdir is not None:
            applied.add(Confinement.PRIVATE_TMP)
        return cls(frozenset(applied), tmpdir, memory_mb, uid, apart)

    def item(self) -> Plan:
        """In an isolating worker, before an item's fork: the item's own plan, its IPC
        namespace and identity; the worker's temporary folder, where the worker made it (no
        tmpfs of its own), handed to the item's uid. What its :meth:`close` gives back is the
        uid alone."""
        applied = self.applied & _PER_ITEM
        uid = None
        if Confinement.UNPRIVILEGED in applied:
            uid = uids().take()  # None: the item is not made (see enter)
            if uid is not None and self.tmpdir is not None:
                try:
                    os.chown(self.tmpdir, uid, uid)
                except OSError:
                    uids().give(uid)
                    uid = None
        return replace(self, applied=applied, tmpdir=None, uid=uid, apart=False, shm_mb=None)

    def enter(self) -> bool:  # pragma: no cover - child only
        """In the child, once it holds only its own descriptors: its namespaces (mount, IPC,
        network), then its identity and no new privileges. False if one could not be entered
        (then the call is not made)."""
        applied = self.applied
        try:
            if Confinement.PRIVATE_SHM in applied:
                sealed = Confinement.SEALED in applied
                if not _private_shm(self.shm_mb, sealed):
                    return False
                os.mkdir(_SHM_TMP)
                os.chmod(_SHM_TMP, 0o1777)  # noqa: S103 - as /tmp: the call may drop its uid
                self.tmpdir = _SHM_TMP.decode()
                if sealed and not _private_tmp():
                    return False
            if self.tmpdir is not None:
                os.environ["TMPDIR"] = self.tmpdir
                tempfile.tempdir = self.tmpdir
            if Confinement.PRIVATE_IPC in applied and not self.apart and not _private_ipc():
                return False
            if Confinement.NO_NETWORK in applied and not _no_network():
                return False
            # Last: the namespaces need the privileges this drops. Asked for and no uid of
            # its own to drop to: not made at all, rather than made as the caller.
            if Confinement.UNPRIVILEGED not in applied or self.apart:
                return True
            if self.uid is None or not _unprivileged(self.uid):
                return False
            # A working directory the uid may not read (a checkout in a 0700 folder) ended a
            # pool's worker at its first look at it: the call starts in its own folder then.
            if not os.access(".", os.R_OK | os.X_OK):
                os.chdir(os.environ.get("TMPDIR", "/"))
            return True
        except OSError:
            return False

    def close(self) -> None:
        """After the call: remove its temporary folder, whatever it holds, and give its uid
        back. A second call does nothing."""
        if self.tmpdir is not None:
            try:
                os.rmdir(self.tmpdir)  # most calls leave it empty: a tenth of rmtree's cost
            except OSError:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        if self.uid is not None:
            uids().give(self.uid)
            self.uid = None


#: What an item does in a watched folder that leaves something there (inotify's events): an
#: entry made or moved in, a change of attributes, the folder itself removed or moved.
_IN_LEFT = 0x4 | 0x80 | 0x100 | 0x400 | 0x800


class Scratch:  # pragma: no cover - pool worker only
    """In a pool's worker: its items' temporary folder (and ``/dev/shm``, where that is the
    worker's own tmpfs), emptied after each item that left anything there, so that no item
    finds what an earlier one left, and nothing piles up over the worker's life. Gone with
    the worker in any case (its tmpfs with its last process; a folder made by its zygote, when
    the zygote reaps it).

    Cheap per item: the folders are watched (inotify, :attr:`watch`), and the worker polls the
    watch with what else it polls after each item; only an item that left something there, or
    that did what the worker's audit hook marks (opened a file, forked, called C), is followed
    by a listing. Where inotify cannot be had, each folder is looked at (``lstat``: change
    time, size, links, mode, inode; a tmpfs folder's size counts its entries) after each item.
    """

    def __init__(self, tmpdir: str, shm: bool) -> None:
        #: Each folder, and the one entry of it that stays (the temporary folder in /dev/shm).
        self.folders = [(tmpdir, "")] + ([(_SHM.decode(), os.path.basename(tmpdir))] if shm else [])
        self.seen = self._look()
        #: An inotify descriptor watching the folders, readable once an item left something
        #: there; -1 where there is none.
        self.watch = _watch([folder for folder, _ in self.folders])

    def _look(self) -> list[tuple[int, ...]]:
        found: list[tuple[int, ...]] = []
        for folder, _ in self.folders:
            st = os.lstat(folder)
            found.append((st.st_ctime_ns, st.st_size, st.st_nlink, st.st_mode, st.st_ino))
        return found

    def clean(self, dirty: bool, watched: bool = False) -> bool:
        """Empty the folders if the item may have left anything there (``dirty``: the audit
        hook saw it do what may; ``watched``: the watch said so); False if they cannot be
        emptied (the worker then retires, and they go with it)."""
        try:
            if self.watch < 0:
                now = self._look()
                if now == self.seen and not dirty:
                    return True
            elif not (dirty or watched):
                return True
            else:
                now = self._look()
            for (folder, keep), before, after in zip(self.folders, self.seen, now, strict=True):
                if not stat.S_ISDIR(after[3]) or after[4] != before[4]:
                    return False  # replaced (by a link elsewhere, say): not ours to empty
                for entry in os.scandir(folder):
                    if entry.name == keep:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
                if after[3] != before[3]:
                    os.chmod(folder, stat.S_IMODE(before[3]))
            self.seen = self._look()
            if self.watch >= 0:
                os.set_blocking(self.watch, False)  # the item may have cleared the flag
                for _ in range(64):  # bounded: the item may have put /dev/zero in its place
                    if not os.read(self.watch, 1 << 16):  # what it said, and the emptying did
                        break
        except BlockingIOError:
            pass
        except OSError:
            return False
        return True


def _watch(folders: list[str]) -> int:  # pragma: no cover - pool worker only
    """A non-blocking inotify descriptor watching ``folders`` for :data:`_IN_LEFT`; -1 where
    there can be none (no C library, or the user's inotify instances used up)."""
    libc = _libc.libc()
    if libc is None:
        return -1
    fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        return -1
    for folder in folders:
        if libc.inotify_add_watch(fd, os.fsencode(folder), _IN_LEFT) < 0:
            os.close(fd)
            return -1
    return fd


def _caller_tmpdir(unprivileged: bool, uid: int | None) -> str | None:
    """A fresh folder in the caller's temporary folder, for a call without a tmpfs of its own;
    where the call drops its uid, one that uid can reach, and ``uid``'s (an isolating worker's
    is handed to each item's uid in turn). None if none can be made."""
    try:
        if not unprivileged:
            return tempfile.mkdtemp(prefix="rewardhang-call-")
        tmpdir = tempfile.mkdtemp(prefix="rewardhang-call-", dir=_reachable_tmp())
    except OSError:
        return None
    if uid is not None:
        try:
            os.chown(tmpdir, uid, uid)
        except OSError:
            os.rmdir(tmpdir)
            return None
    return tmpdir


def _reachable_tmp() -> str:
    """Where another uid can reach a folder of its own: the temporary folder, unless a folder
    above it is closed to others (pytest's are), then ``/tmp``."""
    folder = tempfile.gettempdir()
    path = os.path.realpath(folder)
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return "/tmp"  # noqa: S108 - world-writable and sticky, as it is everywhere
    if not os.stat(folder).st_mode & stat.S_IXOTH:
        return "/tmp"  # noqa: S108
    return folder


def warn_missing(asked: frozenset[Confinement], applied: frozenset[Confinement]) -> None:
    """Log one warning naming what a call asked for and did not get, the first time each is
    missing in this process (the call's :attr:`Outcome.confined` says it every time)."""
    missing = asked - applied - STATE.unconfined_warned
    if missing:
        STATE.unconfined_warned.update(missing)
        log.warning(
            "pytest_rewardhang.guard: calls run without their full confinement: %s",
            "; ".join(_MISSING[confinement] for confinement in sorted(missing)),
        )
