"""Java properties files (``logstore.properties``): the syntax of ``java.util.Properties.load`` with
the line each entry starts on, checked case by case and against Java itself (``java``, when installed:
the same files, the same keys and values), and the safe read of a user's file."""

from __future__ import annotations

import os
import subprocess

import pytest

from external_tools import require
from logstore.properties import NotARegularFileError, parse_properties, read_properties_file

# Each case: file text -> {key: value} as java.util.Properties.load gives it.
CASES = {
    "key=value\n": {"key": "value"},
    "key: value\n": {"key": "value"},
    "key value\n": {"key": "value"},
    "  key  =  value with spaces  \n": {"key": "value with spaces  "},  # trailing whitespace kept
    "key\t:\tvalue\n": {"key": "value"},
    "key = = value\n": {"key": "= value"},  # one separator only
    "key  :=value\n": {"key": "=value"},
    "# comment\n! also a comment\n  # indented\nkey=1\n": {"key": "1"},
    "key=first \\\n    second\n": {"key": "first second"},
    "key=a\\\\\nnext=b\n": {"key": "a\\", "next": "b"},  # an even run of backslashes does not continue
    "key=a\\\\\\\n  b\n": {"key": "a\\b"},
    "# a comment \\\nkey=1\n": {"key": "1"},  # a comment line never continues
    "key=a\\\n# not a comment\n": {"key": "a# not a comment"},
    "path\\:with\\=seps\\ and\\ space = v\n": {"path:with=seps and space": "v"},
    "esc=\\t\\n\\r\\f\\u0041\\u00e9\\q\\\\\n": {"esc": "\t\n\r\fA\u00e9q\\"},
    "empty=\nbare\n": {"empty": "", "bare": ""},
    "dup=1\ndup=2\n": {"dup": "2"},
    "crlf=1\r\nnext=2\rlast=3": {"crlf": "1", "next": "2", "last": "3"},
    "tail=x\\": {"tail": "x"},
    "a=b\\\n\nc=d\n": {"a": "b", "c": "d"},
    ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
     "    username=\"alice\" \\\n    password=\"alice-secret\";\n"):
        {"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                             'username="alice" password="alice-secret";'},
    "unicode=caf\u00e9 \u2603\n": {"unicode": "caf\u00e9 \u2603"},
}


@pytest.mark.parametrize("text", list(CASES), ids=range(len(CASES)))
def test_parse_properties_as_java_does(text):
    assert {entry.key: entry.value for entry in parse_properties(text)} == CASES[text]


def test_entries_carry_the_line_they_start_on():
    text = "# header\n\na=1\nb=two \\\n  lines\nc=3\n"
    assert [(entry.key, entry.line) for entry in parse_properties(text)] == [("a", 3), ("b", 4), ("c", 6)]


def test_a_malformed_unicode_escape_names_the_source_and_line():
    with pytest.raises(ValueError, match=r"^server\.properties line 2: malformed \\uxxxx escape$"):
        parse_properties("ok=1\nbad=\\u12g4\n", "server.properties")


def test_read_properties_file_refuses_what_is_not_a_small_regular_file(tmp_path):
    with pytest.raises(NotARegularFileError, match="a directory, not a regular file"):
        read_properties_file(str(tmp_path), 100, "the config file")
    with pytest.raises(NotARegularFileError, match="no such file"):
        read_properties_file(str(tmp_path / "missing"), 100, "the config file")
    big = tmp_path / "big.properties"
    big.write_text("a=" + "x" * 200)
    with pytest.raises(ValueError, match="holds more than 100 bytes"):
        read_properties_file(str(big), 100, "the config file")
    latin = tmp_path / "latin.properties"
    latin.write_bytes(b"a=caf\xe9\n")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        read_properties_file(str(latin), 100, "the config file")
    if os.path.exists("/dev/zero"):
        with pytest.raises(NotARegularFileError, match="a character device"):
            read_properties_file("/dev/zero", 100, "the config file")


_JAVA_DUMP = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class Dump {
    static String hex(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
        return b.toString();
    }
    public static void main(String[] args) throws Exception {
        for (String path : args) {
            Properties p = new Properties();
            try (Reader r = new InputStreamReader(new FileInputStream(path), StandardCharsets.UTF_8)) { p.load(r); }
            TreeMap<String, String> sorted = new TreeMap<>();
            for (String k : p.stringPropertyNames()) sorted.put(k, p.getProperty(k));
            StringBuilder line = new StringBuilder(path);
            for (Map.Entry<String, String> e : sorted.entrySet()) line.append(" ").append(hex(e.getKey())).append(":").append(hex(e.getValue()));
            System.out.println(line);
        }
    }
}
"""


def _unhex(text: str) -> str:
    return "".join(chr(int(text[i:i + 4], 16)) for i in range(0, len(text), 4))


@pytest.mark.needs_tools("java")
def test_the_same_files_read_the_same_in_java(tmp_path):
    """java.util.Properties.load (the reader Kafka's broker and tools use) on every case: the same
    keys and values. ``java Dump.java`` compiles the source itself, which needs a JDK."""
    require("javac")  # a JRE without its compiler cannot run a Java source file
    (tmp_path / "Dump.java").write_text(_JAVA_DUMP)
    paths = []
    for number, text in enumerate(CASES):
        path = tmp_path / f"case{number}.properties"
        path.write_bytes(text.encode("utf-8"))
        paths.append(str(path))
    result = subprocess.run(["java", str(tmp_path / "Dump.java"), *paths], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(CASES)
    for line, text in zip(lines, CASES):
        _path, *pairs = line.split(" ")
        java = dict((_unhex(key), _unhex(value)) for key, value in (pair.split(":") for pair in pairs))
        ours = {entry.key: entry.value for entry in parse_properties(text)}
        assert ours == java, text
