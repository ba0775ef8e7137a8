"""``logstore perf serve --security`` (``logstore.bench.serve_security``): one real run at tiny
sizes over PLAINTEXT, SSL and SASL_SSL through the CLI (every asked row there, rates above zero, the
ratios to PLAINTEXT computed from those rates), the refusals, and each client's security settings.
Nothing here is timed: the figures are whatever this machine gives."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logstore.bench import serve_security as bench_security
from logstore.bench.serve import render_serve
from logstore.bench.serve_security import Endpoint, LogstoreSecurity, parse_modes

try:
    from logstore.cli.perf import perf
except ModuleNotFoundError:  # the source tree keeps the CLI in cli/, installed as logstore.cli
    from cli.perf import perf

pytestmark = pytest.mark.kafka_clients

MODES = ("PLAINTEXT", "SSL", "SASL_SSL")
RATES = ("confluent produce 2,000 acks=1", "confluent produce 2,000 acks=all", "confluent consume 2,000 (assign)",
         "kafka-python produce 500 acks=1", "kafka-python consume 500")
PER_MODE = (*RATES, "kafka-python new client to Metadata", "acks=all p50, 1 producers", "acks=all p99, 1 producers",
            "acks=all produces in 0.3 s", "server CPU per record, produce 2,000 acks=1",
            "server CPU per record, produce 2,000 acks=all", "server CPU per record, consume 2,000")


@pytest.mark.needs_tools("openssl")  # perf serve makes its certificate with it
def test_a_run_over_plaintext_ssl_and_sasl_ssl_gives_every_row_and_its_cost():
    arguments = ["serve", "--sizes", "2000", "--kafka-python-records", "500", "--latency-producers", "1",
                 "--records-per-transaction", "0",
                 "--latency-seconds", "0.3", "--broker", "logstore", "--repeats", "2", "--json"]
    for mode in MODES:
        arguments += ["--security", mode]
    result = CliRunner().invoke(perf, arguments)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["results"]
    by_key = {(row["security"], row["workload"]): row for row in rows}
    assert len(by_key) == len(rows)  # one row per mode and workload
    for mode in MODES:
        for workload in PER_MODE:
            row = by_key[(mode, workload)]
            assert row["broker"] == "logstore" and row["value"] > 0 and len(row["runs"]) == 2, row
            assert row["value"] in row["runs"]
            plaintext = by_key[("PLAINTEXT", workload)]["value"]
            if mode == "PLAINTEXT":
                assert row["vs_plaintext"] is None
            else:
                assert row["vs_plaintext"] == pytest.approx(row["value"] / plaintext)
        for workload in RATES:  # the best of the rounds
            assert by_key[(mode, workload)]["unit"] == "rec/s"
            assert by_key[(mode, workload)]["value"] == max(by_key[(mode, workload)]["runs"])
        assert by_key[(mode, PER_MODE[5])]["value"] == min(by_key[(mode, PER_MODE[5])]["runs"])  # ms
    for workload in ("start to ready", "RSS after the run"):  # the process's, not a mode's
        assert by_key[(None, workload)]["value"] > 0 and by_key[(None, workload)]["vs_plaintext"] is None

    text = render_serve(rows)
    header = text.splitlines()[0].split()
    assert header[:2] == ["workload", "broker"] and "PLAINTEXT" in header
    produce = [line for line in text.splitlines() if "logstore SASL_SSL" in line][1]  # after the connect row
    assert f"{by_key[('SASL_SSL', RATES[0])]['vs_plaintext']:.2f}x" in produce
    for mode in MODES:
        assert sum(f"logstore {mode} " in line for line in text.splitlines()) == len(PER_MODE)
    assert "authorizer.enable=false" in text


def test_an_unknown_mode_or_mechanism_is_refused_in_one_line():
    result = CliRunner().invoke(perf, ["serve", "--broker", "logstore", "--security", "SSL", "--security", "TLS"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: unknown security mode 'TLS': give PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"]
    with pytest.raises(ValueError, match="GSSAPI"):
        LogstoreSecurity(("SASL_SSL",), "GSSAPI")
    assert parse_modes(["ssl", "SSL", "plaintext"]) == ("SSL", "PLAINTEXT")


def test_a_missing_openssl_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_security.shutil, "which", lambda _name: None)
    with pytest.raises(RuntimeError, match="openssl"):
        LogstoreSecurity(("SSL",)).prepare(str(tmp_path / "data"), str(tmp_path))


def test_each_client_gets_its_own_security_settings():
    assert Endpoint("h:1").confluent() == {"bootstrap.servers": "h:1"}
    assert Endpoint("h:1").kafka_python() == {"bootstrap_servers": "h:1"}
    secured = Endpoint("h:1", "SASL_SSL", "ca.pem", "SCRAM-SHA-512", "perf", "secret")
    assert secured.confluent() == {"bootstrap.servers": "h:1", "security.protocol": "sasl_ssl",
                                   "ssl.ca.location": "ca.pem", "sasl.mechanisms": "SCRAM-SHA-512",
                                   "sasl.username": "perf", "sasl.password": "secret"}
    assert secured.kafka_python() == {"bootstrap_servers": "h:1", "security_protocol": "SASL_SSL",
                                      "ssl_cafile": "ca.pem", "sasl_mechanism": "SCRAM-SHA-512",
                                      "sasl_plain_username": "perf", "sasl_plain_password": "secret"}
    assert "secret" not in repr(secured)
    assert Endpoint("h:1", "SSL", "ca.pem").kafka_python() == {
        "bootstrap_servers": "h:1", "security_protocol": "SSL", "ssl_cafile": "ca.pem"}
    assert Endpoint("h:1", "SASL_PLAINTEXT", None, "PLAIN", "u", "p").confluent() == {
        "bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
        "sasl.username": "u", "sasl.password": "p"}


def test_a_plaintext_only_run_keeps_the_side_by_side_table():
    rows = [{"broker": broker, "security": security, "workload": workload, "value": value, "unit": unit}
            for broker, factor in (("logstore", 1.0), ("tansu", 2.0))
            for security, workload, value, unit in ((None, "start to ready", 0.2, "s"),
                                                    ("PLAINTEXT", "confluent produce 2,000 acks=1", 1e6, "rec/s"))
            for value in (value * factor,)]
    lines = render_serve(bench_security.add_costs(rows)).splitlines()
    assert lines[0].split() == ["workload", "logstore", "tansu", "unit", "logstore/tansu"]
    assert lines[3].split()[-1] == "0.50x" and len(lines) == 4


def test_tansu_stays_plaintext_and_is_compared_with_logstores_plaintext_row():
    rows = [{"broker": "logstore", "security": mode, "workload": "confluent produce 2,000 acks=1", "value": value,
             "unit": "rec/s", "runs": [value]} for mode, value in (("PLAINTEXT", 1e6), ("SSL", 5e5))]
    rows += [{"broker": "tansu", "security": "SSL", "workload": "not run", "value": None,
              "unit": "Tansu is measured over PLAINTEXT only, the reference for the PLAINTEXT rows"},
             {"broker": "tansu", "security": "PLAINTEXT", "workload": "confluent produce 2,000 acks=1", "value": 2e6,
              "unit": "rec/s", "runs": [2e6]}]
    lines = render_serve(bench_security.add_costs(rows)).splitlines()
    assert lines[0].split()[-2:] == ["PLAINTEXT", "logstore/tansu"]
    assert lines[2].split()[-1] == "0.50x" and "logstore PLAINTEXT" in lines[2]  # against Tansu
    assert lines[3].split()[-1] == "0.50x" and "logstore SSL" in lines[3]  # against PLAINTEXT
    assert "tansu PLAINTEXT" in lines[4] and lines[4].split()[-1] == "rec/s"
    assert "tansu (SSL): Tansu is measured over PLAINTEXT only" in lines[6]
