"""JAAS configuration lines as Kafka takes them in ``sasl.jaas.config``.

One login module entry::

    org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="alice-secret";

Clients take ``username``/``password`` from it (``client_credentials``).  A broker's
``listener.name.<listener>.plain.sasl.jaas.config`` may list PLAIN users as Kafka's
``PlainLoginModule`` does, one ``user_<name>="<password>"`` option per user
(``plain_users``).  Values are double-quoted strings (``\\"`` and ``\\\\`` escaped) or
bare words.  Errors (``JaasError``) never quote the text: it holds passwords.
"""

from __future__ import annotations

import re

from spark_coord.secret import Password, reveal

_MODULE = re.compile(r"\s*([A-Za-z_$][\w$.]*)\s+(required|requisite|sufficient|optional)\s*")
_OPTION = re.compile(r'\s*([A-Za-z_][\w.\-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))\s*')

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class JaasError(ValueError):
    """A JAAS line that cannot be read (the message never contains the line: it holds secrets)."""


def parse(text: "str | Password") -> tuple[str, dict[str, str]]:
    """``(login module class, {option: value})`` of one JAAS entry ending in ``;``."""
    raw = reveal(text) or ""
    m = _MODULE.match(raw)
    if not m:
        raise JaasError("sasl.jaas.config: expected '<LoginModule class> required key=\"value\" ... ;'")
    pos = m.end()
    options: dict[str, str] = {}
    while True:
        rest = raw[pos:].strip()
        if rest == ";":
            return m.group(1), options
        if not rest:
            raise JaasError("sasl.jaas.config: the entry must end with ';'")
        om = _OPTION.match(raw, pos)
        if not om:
            raise JaasError(f"sasl.jaas.config: cannot read the option at character {pos} "
                            "(expected key=\"value\")")
        value = om.group(2)
        value = re.sub(r"\\(.)", r"\1", value) if value is not None else om.group(3)
        options[om.group(1)] = value
        pos = om.end()


def client_credentials(text: "str | Password") -> tuple[str, Password]:
    """``(username, password)`` from a client's JAAS line (Plain or Scram login module)."""
    _, options = parse(text)
    if "username" not in options or "password" not in options:
        raise JaasError("sasl.jaas.config: needs both username=\"...\" and password=\"...\"")
    return options["username"], Password(options["password"])


def plain_users(text: "str | Password") -> dict[str, Password]:
    """``{user: password}`` from a broker's PlainLoginModule line (``user_<name>="<password>"`` options)."""
    module, options = parse(text)
    if module != PLAIN_MODULE:
        raise JaasError(f"plain.sasl.jaas.config: expected {PLAIN_MODULE}, got {module}")
    return {k[len("user_"):]: Password(v) for k, v in options.items() if k.startswith("user_") and len(k) > 5}
