"""`parse_properties` reads a properties file as java.util.Properties.load does: checked
against Java itself (Java 17 runs a small program over the same files) on hand-written cases
for each rule and on random text made of the characters the rules are about."""
from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from kafkafast.config import BrokerConfig, ConfigError, parse_properties

JAVA_READER = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

public class Props {
    public static void main(String[] args) throws Exception {
        for (String name : args) {
            Properties p = new Properties();
            String out;
            try (Reader r = Files.newBufferedReader(Paths.get(name), StandardCharsets.UTF_8)) {
                p.load(r);
                StringBuilder sb = new StringBuilder();
                for (String k : new TreeSet<>(p.stringPropertyNames())) {
                    sb.append(k).append('\0').append(p.getProperty(k)).append('\0');
                }
                out = sb.toString();
            } catch (IllegalArgumentException e) {
                out = "\u0001ERROR";
            }
            Files.write(Paths.get(name + ".out"), out.getBytes(StandardCharsets.UTF_8));
        }
    }
}
"""

CASES = [
    "a=b # not a comment\n",
    "  # a comment\n! another\n\t\f# and another\nk=v\n",
    "key1 value1\nkey2:value2\nkey3 = value3\nkey4\t:\t value4\nkey5==x\nkey6 :=y\n",
    "multi = one \\\n      two \\\n\tthree\n",
    "even=x\\\\\nnext=y\n",
    "odd=x\\\\\\\n  continued\n",
    "# comment ending in a backslash \\\nnot.continued=1\n",
    "cont=a\\\n# not a comment here\n",
    "e\\ k\\=ey\\:x = v\n",
    "esc=\\t\\n\\r\\f\\q\\\\ \\u0041\\u00e9\n",
    "pair=\\ud83d\\ude00\n",
    "=empty key\nonlykey\n  \nspaces.after=v  \n",
    "crlf=1\r\ncr=2\rlf=3\n",
    "end.with.backslash=v\\",
    "dup=1\ndup=2\n",
    "bad=\\u12G4\n",
    "\\\n# a comment: nothing was read before it\nk=v\n",
    "\\\n",
    "\\\r\n",
]


def java_reads(tmp_path, texts: list[str]) -> list[dict[str, str] | None]:
    """What java.util.Properties reads from each text (None: it refuses it)."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("needs Java 17 (apt-get install openjdk-17-jre-headless; run.sh installs it)")
    (tmp_path / "Props.java").write_text(JAVA_READER)
    names = []
    for i, text in enumerate(texts):
        (tmp_path / f"case{i}").write_bytes(text.encode("utf-8"))
        names.append(f"case{i}")
    subprocess.run([java, "Props.java", *names], cwd=tmp_path, check=True, timeout=120)
    out: list[dict[str, str] | None] = []
    for name in names:
        raw = (tmp_path / f"{name}.out").read_bytes().decode("utf-8")  # no newline translation
        if raw == "\x01ERROR":
            out.append(None)
            continue
        parts = raw.split("\0")[:-1]
        out.append(dict(zip(parts[0::2], parts[1::2])))
    return out


def python_reads(text: str) -> dict[str, str] | None:
    try:
        return dict(sorted(parse_properties(text).items()))
    except ConfigError:
        return None


def random_texts(n: int) -> list[str]:
    rng = random.Random(26)
    atoms = ["a", "b", "=", ":", " ", "\t", "\f", "\\", "\\\\", "\n", "\r\n", "\r", "#", "!", "\\u0041", "\\u00",
             "x.y", "\\n", "\\t", "\\=", "\\ ", "\\\n", "\\\r\n", "é"]
    return ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 60))) for _ in range(n)]


def test_parse_properties_reads_what_java_reads(tmp_path):
    texts = CASES + random_texts(400)
    for text, java in zip(texts, java_reads(tmp_path, texts)):
        assert python_reads(text) == java, repr(text)


def test_rules_each_case_pins():
    assert parse_properties("a=b # not a comment\n") == {"a": "b # not a comment"}
    assert parse_properties("key1 value1\nkey2:value2\nkey5==x\n") == {"key1": "value1", "key2": "value2",
                                                                          "key5": "=x"}
    assert parse_properties("multi = one \\\n      two\n") == {"multi": "one two"}
    assert parse_properties("esc=\\u0041\\t\\q\n") == {"esc": "A\tq"}
    with pytest.raises(ConfigError, match=r"line 2: Malformed \\uxxxx encoding"):
        parse_properties("ok=1\nbad=\\u12G4\n")


def test_booleans_take_true_and_false_in_any_case_only():
    assert BrokerConfig.load(None, {"auto.create.topics.enable": "TRUE"}).get_bool("auto.create.topics.enable")
    assert not BrokerConfig.load(None, {"auto.create.topics.enable": " False "}).get_bool("auto.create.topics.enable")
    for bad in ("maybe", "1", "yes", ""):
        with pytest.raises(ConfigError, match=f"Invalid value {bad} for configuration auto.create.topics.enable: "
                                              "Expected value to be either true or false"):
            BrokerConfig.load(None, {"auto.create.topics.enable": bad})
