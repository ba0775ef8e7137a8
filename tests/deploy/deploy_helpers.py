"""What the deploy tests share: readers of ``deploy/``'s files (the Dockerfile's instructions, the
unit's sections, the compose file), the substitution of the addresses and the data dir that lets a
file's own command line run here (loopback, port 0, a temp dir), and a ``logstore serve`` process
started from such a command line and stopped by its pid.

Only addresses, ports and the data dir are substituted: the options, the settings and the
environment are the files' own, so a test that runs them runs what the container or the unit would."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
"""The venv's bin dir: its ``logstore`` and ``python`` stand for the image's and the unit's."""

KAFKA_PORT = 9092
METRICS_PORT = 9308
_ADDRESS = re.compile(r"\b(?:0\.0\.0\.0|127\.0\.0\.1|localhost|logstore):(\d+)\b")


@dataclass
class Instruction:
    keyword: str  # upper-cased: FROM, RUN, ENV...
    arguments: str  # the rest, continuation lines joined
    line: int


def dockerfile_instructions(path: Path) -> list[Instruction]:
    """The Dockerfile's instructions, comments dropped and ``\\`` continuations joined (Docker's
    parser: a comment line inside a continued instruction is skipped)."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        keyword, _, rest = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), start))
    assert not pending, f"{path}: the last instruction ends in a continuation"
    return instructions


def exec_form(arguments: str) -> list[str]:
    """An instruction's JSON (exec) form; a shell-form one is refused: the tests run the exec form."""
    assert arguments.startswith("["), f"not in exec form: {arguments}"
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), arguments
    return value


def env_of(instructions: list[Instruction]) -> dict[str, str]:
    """The ENV of the final stage (``KEY=VALUE ...`` or the older ``KEY VALUE``)."""
    env: dict[str, str] = {}
    for instruction in final_stage(instructions):
        if instruction.keyword == "ENV":
            words = shlex.split(instruction.arguments)
            if words and "=" not in words[0]:
                env[words[0]] = " ".join(words[1:])
            else:
                env.update(word.split("=", 1) for word in words)
    return env


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last_from = max(index for index, instruction in enumerate(instructions) if instruction.keyword == "FROM")
    return instructions[last_from:]


def one(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [instruction for instruction in final_stage(instructions) if instruction.keyword == keyword]
    assert found, f"the final stage has no {keyword}"
    return found[-1]  # Docker uses the last one


def systemd_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections: each key's values in order (a key may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    section = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{path}: {line!r} before any section"
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return sections


def substitute(text: str, ports: dict[int, int], data_dir: str | None = None, here: str | None = None) -> str:
    """``text`` with each ``HOST:PORT`` of ``ports`` made ``127.0.0.1:NEW`` and the data dir
    ``data_dir`` made ``here``."""
    if data_dir is not None:
        text = text.replace(data_dir, here)
    return _ADDRESS.sub(lambda match: f"127.0.0.1:{ports[int(match.group(1))]}"
                        if int(match.group(1)) in ports else match.group(0), text)


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any ``LOGSTORE_`` variable of the test run's own, with the venv's
    bin dir first on PATH (where ``logstore`` and ``python`` are), and ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.update(extra)
    return env


class Served:
    """``logstore serve`` started from a file's command line; its bound addresses read from the
    lines it prints once ready. Stopped by SIGTERM to its own pid (``stop``), killed if it outlives
    the test."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path):
        self.process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.lines: list[str] = []
        self.kafka = self.metrics = None
        for _ in range(10):  # the listening line(s), the descriptors line, the metrics line
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith("logstore serve: listening on ") and self.kafka is None:
                self.kafka = line.split("listening on ", 1)[1].split()[0]
            if line.startswith("logstore serve: metrics on http://"):
                self.metrics = line.split("http://", 1)[1].strip().removesuffix("/metrics")
            if line.startswith("logstore serve: descriptor limit") and "--metrics-listen" not in argv:
                break
            if self.metrics is not None:
                break
        if self.kafka is None:
            self.kill()
            raise AssertionError(f"serve did not start: {self.lines} {self.process.stderr.read()}")

    def port(self, which: str) -> int:
        return int(getattr(self, which).rsplit(":", 1)[1])

    def stop(self, timeout_s: float) -> tuple[int, str]:
        """SIGTERM, then its exit code and stderr (killed, and a failure, past ``timeout_s``)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"serve did not stop within {timeout_s} s of SIGTERM") from None
        stderr = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return code, stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        for stream in (self.process.stdout, self.process.stderr):
            if not stream.closed:
                stream.close()
