"""``logstore perf serve --security``: the cost of TLS and SASL on the produce and consume figures.

One ``logstore serve`` process gets one listener per security mode asked for (Kafka's names:
``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``), and every workload of ``perf serve``
runs over each of them in the same run, each client with its own security settings; each mode's
figures are then given as a ratio of PLAINTEXT's. What it owns:

- ``parse_modes``: the modes asked for, checked (one-line ``ValueError`` naming the unknown one);
- ``self_signed_certificate``: a throwaway EC P-256 certificate for 127.0.0.1 made with the
  ``openssl`` command-line tool (the standard library cannot make one); the clients trust it as
  their CA;
- ``LogstoreSecurity``: what the server process needs (its ``logstore`` arguments, the SASL user
  written to the data dir before it starts) and, from the lines it prints, one ``Endpoint`` per mode;
- ``Endpoint``: one listener's address and security, as confluent-kafka and kafka-python spell it;
- ``add_costs`` (each row's ``vs_plaintext``) and ``security_table`` (the text table of a run of
  several modes, one row per workload and broker/mode).

ACL checks are off on the measured server (``authorizer.enable=false``): their cost is measured
separately. Tansu is measured over PLAINTEXT only, the reference of the PLAINTEXT rows.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable

from ..server.security.listeners import PLAINTEXT, PROTOCOLS, SASL_PLAINTEXT, SASL_SSL, SSL

MODES = PROTOCOLS
TLS_MODES = (SSL, SASL_SSL)
SASL_MODES = (SASL_PLAINTEXT, SASL_SSL)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MECHANISM = "SCRAM-SHA-512"
USER = "perf"
OPENSSL_TIMEOUT_S = 30.0
"""Seconds the openssl call may take (it takes milliseconds; a loaded box gets slack)."""
SECURITY_HELP = ("logstore's listener security (repeatable): PLAINTEXT (the default), SSL, SASL_PLAINTEXT, SASL_SSL. "
                 "One server with a listener each, a throwaway self-signed certificate (made with openssl), a SASL "
                 "user; ACL checks off (authorizer.enable=false: their cost is measured separately); each figure "
                 "also as a ratio of PLAINTEXT's in the same run. Tansu runs over PLAINTEXT only.")
"""``perf serve --security``'s help (here to keep the CLI module short)."""


def parse_modes(modes) -> tuple[str, ...]:
    """The security modes asked for, upper-cased, in order, once each; ``ValueError`` naming an
    unknown one."""
    parsed = tuple(dict.fromkeys(str(mode).strip().upper() for mode in modes))
    for mode in parsed:
        if mode not in MODES:
            raise ValueError(f"unknown security mode {mode!r}: give {', '.join(MODES[:-1])} or {MODES[-1]}")
    if not parsed:
        raise ValueError(f"give at least one security mode: {', '.join(MODES)}")
    return parsed


@dataclass(frozen=True)
class Endpoint:
    """One listener: ``address`` (HOST:PORT), its ``protocol`` and what a client needs to speak it
    (``cafile`` to trust for TLS, SASL ``mechanism``, ``username``, ``password``)."""

    address: str
    protocol: str = PLAINTEXT
    cafile: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def confluent(self) -> dict:
        """confluent-kafka (librdkafka) settings: bootstrap.servers and the security ones."""
        config = {"bootstrap.servers": self.address}
        if self.protocol != PLAINTEXT:
            config["security.protocol"] = self.protocol.lower()
        if self.protocol in TLS_MODES:
            config["ssl.ca.location"] = self.cafile
        if self.protocol in SASL_MODES:
            config.update({"sasl.mechanisms": self.mechanism, "sasl.username": self.username,
                           "sasl.password": self.password})
        return config

    def kafka_python(self) -> dict:
        """kafka-python keyword arguments: bootstrap_servers and the security ones."""
        config = {"bootstrap_servers": self.address}
        if self.protocol != PLAINTEXT:
            config["security_protocol"] = self.protocol
        if self.protocol in TLS_MODES:
            config["ssl_cafile"] = self.cafile
        if self.protocol in SASL_MODES:
            config.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                           "sasl_plain_password": self.password})
        return config


def self_signed_certificate(directory: str) -> tuple[str, str]:
    """(certificate, key) PEM paths of a new self-signed EC P-256 certificate for 127.0.0.1
    (subjectAltName IP:127.0.0.1, valid two days) in ``directory``, made by ``openssl``;
    ``RuntimeError`` naming openssl when it is missing or fails."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("perf serve --security SSL/SASL_SSL makes a throwaway TLS certificate with the openssl "
                           "command-line tool, which is not on PATH: install openssl")
    cert, key = os.path.join(directory, "perf-cert.pem"), os.path.join(directory, "perf-key.pem")
    command = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
               "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
               "-addext", "subjectAltName=IP:127.0.0.1"]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=OPENSSL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"openssl did not make the certificate within {OPENSSL_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"openssl could not make a self-signed certificate (exit {done.returncode}): {last}")
    return cert, key


class LogstoreSecurity:
    """The security of one ``logstore serve`` process measured over ``modes``: ``prepare`` writes the
    SASL user to the data dir and makes the certificate (in the parent, before the spawn), ``arguments``
    are the ``logstore`` command line's, ``endpoints(lines)`` reads the addresses the server printed."""

    def __init__(self, modes: tuple[str, ...], mechanism: str = DEFAULT_MECHANISM) -> None:
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(f"unknown SASL mechanism {mechanism!r}: give {', '.join(SASL_MECHANISMS)}")
        self.modes, self.mechanism = modes, mechanism
        self.cafile: str | None = None
        self.key: str | None = None
        self.password: str | None = None

    def prepare(self, data_dir: str, work_dir: str) -> None:
        """Make what the modes need before the server starts: the certificate, the SASL user."""
        if any(mode in TLS_MODES for mode in self.modes):
            self.cafile, self.key = self_signed_certificate(work_dir)
        if any(mode in SASL_MODES for mode in self.modes):
            from ..server.security.credentials import CredentialStore
            self.password = secrets.token_urlsafe(18)
            # PLAIN is checked against the user's SCRAM credential.
            stored = self.mechanism if self.mechanism.startswith("SCRAM-") else DEFAULT_MECHANISM
            os.makedirs(data_dir, exist_ok=True)
            CredentialStore(data_dir).set(USER, stored, self.password)

    def arguments(self, data_dir: str) -> list[str]:
        """``logstore`` arguments serving ``data_dir`` with one listener on a free port per mode."""
        if self.modes == (PLAINTEXT,):
            return ["--dir", data_dir, "serve", "--listen", "127.0.0.1:0"]  # as before --security existed
        arguments = ["--dir", data_dir, "--set", "authorizer.enable=false", "serve"]
        for mode in self.modes:
            arguments += ["--listen", f"{mode}://127.0.0.1:0"]
        if self.cafile:
            arguments += ["--ssl-cert", self.cafile, "--ssl-key", self.key]
        return arguments

    def endpoints(self, lines: list[str]) -> dict[str, Endpoint]:
        """Each mode's ``Endpoint`` from the ``logstore serve: listening on [PROTO://]HOST:PORT ...``
        lines the server printed (the first without a protocol is PLAINTEXT)."""
        found = {}
        for line in lines:
            where = line.split("listening on ", 1)[1].split()[0]
            protocol, _, address = where.rpartition("://")
            found[protocol or PLAINTEXT] = address
        missing = [mode for mode in self.modes if mode not in found]
        if missing:
            raise RuntimeError(f"logstore serve printed no listener for {', '.join(missing)}: {lines!r}")
        return {mode: Endpoint(found[mode], mode, self.cafile if mode in TLS_MODES else None,
                               *((self.mechanism, USER, self.password) if mode in SASL_MODES else ()))
                for mode in self.modes}


def add_costs(rows: list[dict]) -> list[dict]:
    """Give every row ``vs_plaintext``: its value over the same broker's PLAINTEXT value of the same
    workload in the same run (None for PLAINTEXT rows, process-wide rows and missing values)."""
    plaintext = {(row["broker"], row["workload"]): row["value"] for row in rows if row.get("security") == PLAINTEXT}
    for row in rows:
        base = plaintext.get((row["broker"], row["workload"]))
        mode = row.get("security")
        measured = mode not in (None, PLAINTEXT) and base and row["value"] is not None
        row["vs_plaintext"] = row["value"] / base if measured else None
    return rows


def security_table(rows: list[dict], format_value: Callable[[float, str], str]) -> tuple[tuple, list[tuple], list[str]]:
    """(header, rows, notes) of the text table of a run over several modes: per workload, one row per
    broker and mode (``logstore SASL_SSL``), its value, ``vs PLAINTEXT`` and, when Tansu ran, on
    logstore's PLAINTEXT row ``logstore/tansu``; the notes say what was not run and how to read it."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row["workload"] != "not run":
            groups.setdefault(row["workload"], []).append(row)
    tansu = {row["workload"]: row["value"] for row in rows if row["broker"] == "tansu" and row["workload"] != "not run"}
    width = max((len(f"{row['broker']} {row.get('security') or ''}".strip()) for members in groups.values()
                 for row in members), default=0)
    table = []
    for workload, members in groups.items():
        for index, row in enumerate(members):
            label = f"{row['broker']} {row['security']}" if row.get("security") else row["broker"]
            value = "-" if row["value"] is None else format_value(row["value"], row["unit"])
            cost = "" if row.get("vs_plaintext") is None else f"{row['vs_plaintext']:.2f}x"
            theirs = tansu.get(workload)
            versus = (f"{row['value'] / theirs:.2f}x" if row["broker"] == "logstore" and row.get("security") in
                      (PLAINTEXT, None) and theirs and row["value"] else "")
            table.append((workload if index == 0 else "", label.ljust(width), value, row["unit"], cost,
                          *((versus,) if tansu else ())))
    notes = [f"{row['broker']} ({row['security']}): {row['unit']}" if row.get("security") else
             f"{row['broker']}: {row['unit']}" for row in rows if row["workload"] == "not run"]
    rounds = max((len(row.get("runs") or ()) for row in rows), default=0)
    notes.append("vs PLAINTEXT: the figure over logstore PLAINTEXT's in this run (rec/s, records: below 1x is the "
                 "cost; ms: above 1x)")
    notes.append("ACL checks off (authorizer.enable=false)" + (
        f"; each value the best of {rounds} interleaved rounds (every one in --json)" if rounds > 1 else ""))
    header = ("workload", "broker".ljust(width), "value", "unit", "vs PLAINTEXT", *(("logstore/tansu",) * bool(tansu)))
    return header, table, notes
