"""The states a power loss can leave, enumerated from a recording of file operations
(``logstore.testing.RecordingFileSystem``; used by tests/crash/test_power_loss_states.py).

``DiskModel`` replays the recording operation by operation and knows, after each one, what is
durable and what is not:

- per file (``ino``): its content at its last fsync, and the writes and truncations since;
- per directory: its entries at its last directory fsync, and the entry changes since (creations,
  renames, removals).

A power loss at that point leaves, independently for every file and every directory (so a file may
keep an unsynced write while another lost an earlier one: reorderings across files):

- a file: its durable content plus a prefix of the operations since, the last kept write possibly
  torn: only a prefix of its bytes reached the disk, and the last of those may read as zeros (the
  size was updated, the block never written);
- a directory: its durable entries plus a prefix of the changes since (the later ones undone, newest
  first: a rename not yet durable is undone, a created file vanishes, a removed one comes back).

That is the model of ALICE (OSDI '14) for ext4-like file systems, without reordering inside one file.
Writes through a memory mapping (indexes) count as made at their msync/fsync: a mapping's unsynced
writes are all lost, one state a power loss can leave. ``DiskModel.sample`` draws states, ``files``
turns one into ``{relative path: content}`` and ``materialise`` writes that into a directory.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from dataclasses import dataclass, field


@dataclass
class Inode:
    durable: bytes = b""
    volatile: list = field(default_factory=list)  # ("write", position, data) | ("truncate", size)


def _apply(content: bytearray, op: tuple) -> None:
    if op[0] == "write":
        _, position, data = op
        if len(content) < position:
            content.extend(bytes(position - len(content)))
        content[position:position + len(data)] = data
    else:
        size = op[1]
        if size < len(content):
            del content[size:]
        else:
            content.extend(bytes(size - len(content)))


@dataclass(frozen=True)
class State:
    """One power-loss state: per directory how many pending changes survive, per file how many
    volatile operations, and the tear of the last kept write: (bytes kept, of which zeroed at the end)."""

    dirs: tuple  # ((dir id, kept changes), ...)
    files: tuple  # ((ino, kept operations, tear or None), ...)


class DiskModel:
    """Replays a ``RecordingFileSystem`` recording; see the module docstring."""

    def __init__(self) -> None:
        self.inodes: dict[int, Inode] = {}
        self.durable_ns: dict[int, dict[str, tuple]] = {0: {}}  # dir id -> name -> ("f", ino) | ("d", dir id)
        self.current_ns: dict[int, dict[str, tuple]] = {0: {}}
        self.pending: dict[int, list[tuple]] = {}  # dir id -> changes since its last fsync

    def step(self, op: tuple) -> None:
        kind = op[0]
        if kind in ("mkdir", "create"):
            _, parent, name, number = op
            if kind == "mkdir":
                entry = ("d", number)
                self.durable_ns[number], self.current_ns[number] = {}, {}
            else:
                entry = ("f", number)
                self.inodes[number] = Inode()
            self.current_ns[parent][name] = entry
            self.pending.setdefault(parent, []).append(("link", name, entry))
        elif kind == "rename":
            _, parent, source, target = op
            self.current_ns[parent][target] = self.current_ns[parent].pop(source)
            self.pending.setdefault(parent, []).append(("rename", source, target))
        elif kind in ("remove", "remove_dir"):
            _, parent, name = op
            del self.current_ns[parent][name]
            self.pending.setdefault(parent, []).append(("unlink", name))
        elif kind == "fsync_dir":
            self.durable_ns[op[1]] = dict(self.current_ns[op[1]])
            self.pending.pop(op[1], None)
        elif kind in ("write", "truncate"):
            self.inodes[op[1]].volatile.append((kind, *op[2:]))
        elif kind == "fsync":
            inode = self.inodes[op[1]]
            inode.durable = op[2] if op[2] is not None else bytes(self._content(inode, len(inode.volatile), None))
            inode.volatile = []
        elif kind != "mark":
            raise ValueError(f"unknown operation {kind!r}")

    # --- states ----------------------------------------------------------------------------------

    def uncertainty(self) -> int:
        """How many unsynced operations and directory changes there are now (0: one state only)."""
        return sum(len(ops) for ops in self.pending.values()) + sum(len(i.volatile) for i in self.inodes.values())

    def sample(self, rng: random.Random, mode: str = "random") -> State:
        """A state: ``"all"`` keeps everything (a process crash), ``"none"`` only what is durable,
        ``"random"`` an independent random prefix per file and directory, the last kept write torn
        a third of the time."""
        dirs = []
        for number, ops in sorted(self.pending.items()):
            kept = len(ops) if mode == "all" else 0 if mode == "none" else rng.randint(0, len(ops))
            dirs.append((number, kept))
        files = []
        for ino, inode in sorted(self.inodes.items()):
            if not inode.volatile:
                continue
            count = len(inode.volatile)
            kept = count if mode == "all" else 0 if mode == "none" else rng.randint(0, count)
            tear = None
            if mode == "random" and kept and rng.random() < 0.33:
                last = inode.volatile[kept - 1]
                if last[0] == "write" and len(last[2]) > 1:
                    size = len(last[2])
                    boundaries = [b for b in range(512, size, 512)]  # sector boundaries inside the write
                    cut = rng.choice(boundaries) if boundaries and rng.random() < 0.5 else rng.randint(1, size - 1)
                    zeroed = min(cut, rng.choice((0, 0, 1, 8, 512)))
                    tear = (cut, zeroed)
            files.append((ino, kept, tear))
        return State(tuple(dirs), tuple(files))

    def _content(self, inode: Inode, kept: int, tear: tuple | None) -> bytearray:
        content = bytearray(inode.durable)
        for index, op in enumerate(inode.volatile[:kept]):
            if tear is not None and index == kept - 1:
                cut, zeroed = tear
                data = op[2][:cut]
                op = ("write", op[1], data[:cut - zeroed] + bytes(zeroed))
            _apply(content, op)
        return content

    def files(self, state: State) -> tuple[dict[str, bytes], list[str]]:
        """The state as ``({relative file path: content}, [relative dir paths])``."""
        kept_dirs = dict(state.dirs)
        kept_files = {ino: (kept, tear) for ino, kept, tear in state.files}
        out: dict[str, bytes] = {}
        dirs: list[str] = []

        def walk(number: int, prefix: str) -> None:
            entries = dict(self.durable_ns[number])
            for change in self.pending.get(number, [])[:kept_dirs.get(number, 0)]:
                if change[0] == "link":
                    entries[change[1]] = change[2]
                elif change[0] == "rename":
                    entries[change[2]] = entries.pop(change[1])
                else:
                    entries.pop(change[1], None)
            for name, (kind, ident) in sorted(entries.items()):
                path = prefix + name
                if kind == "d":
                    dirs.append(path)
                    walk(ident, path + "/")
                else:
                    inode = self.inodes[ident]
                    kept, tear = kept_files.get(ident, (0, None))
                    out[path] = bytes(self._content(inode, kept, tear)) if inode.volatile else inode.durable

        walk(0, "")
        return out, dirs


def fingerprint(files: dict[str, bytes], dirs: list[str]) -> bytes:
    """A digest that tells two states apart by what a reader of the disk would see."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(dirs):
        digest.update(b"d\0" + path.encode() + b"\0")
    for path, content in sorted(files.items()):
        digest.update(b"f\0" + path.encode() + b"\0" + len(content).to_bytes(8, "little"))
        digest.update(content)
    return digest.digest()


def materialise(root: str, files: dict[str, bytes], dirs: list[str]) -> None:
    """Write a state into ``root`` (emptied first)."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for path in dirs:
        os.makedirs(os.path.join(root, path), exist_ok=True)
    for path, content in files.items():
        with open(os.path.join(root, path), "wb") as handle:
            handle.write(content)


def scratch_root() -> str:
    """A directory for materialised states: in memory (/dev/shm) when there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"
