"""Jars of a Maven dependency list, resolved once into a cache outside the repository.

``resolve(pom, name)`` runs ``mvn dependency:copy-dependencies`` for the dependency list
``pom`` (a ``pom``-packaged project under ``scripts/``) and returns the directory holding
the jars: ``$SPARK_COORD_MAVEN_CACHE``, else ``$XDG_CACHE_HOME/spark-coord/maven``, else
``~/.cache/spark-coord/maven``, in a folder named after ``name`` and a hash of the pom and
of the properties given, so a changed list is resolved again.  A resolved folder is
reused as it is, with no Maven run and no network.

Resolvers that run at once (pytest-xdist workers) are safe: one takes the cache's file
lock and resolves into a temporary folder that is renamed into place; the others wait on
the lock and find the folder done (and two Maven runs never write to the local repository
at once).  Maven runs on a copy of the pom, so it writes nothing into
the working tree.  Where ``mvn`` is missing, Debian's ``maven`` package is installed when
we are root with apt-get; otherwise ``MavenUnavailable`` says why (tests skip with it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: The file a finished folder holds: what was resolved, and how long it took.
DONE = ".resolved.json"

#: How long a failed resolve is answered from its record (``<folder>.failed``) instead of
#: running Maven again, in seconds: parallel test workers would otherwise each wait for
#: their own failing run.
FAILED_TTL_S = 600.0

#: Maven's lines about where to read more, not what went wrong.
_BOILERPLATE = ("-e switch", "-X switch", "please read the following", "[Help 1]", "http://cwiki.apache.org")


class MavenUnavailable(RuntimeError):
    """The jars cannot be had here: no ``mvn``, or Maven failed (the message says why)."""


def cache_dir() -> Path:
    explicit = os.environ.get("SPARK_COORD_MAVEN_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-coord" / "maven"


def resolved_dir(pom: Path, name: str, properties: dict[str, str] | None = None) -> Path:
    """Where ``resolve`` puts the jars of ``pom`` with ``properties`` (done or not)."""
    key = hashlib.sha256(pom.read_bytes() + json.dumps(properties or {}, sort_keys=True).encode()).hexdigest()
    return cache_dir() / f"{name}-{key[:16]}"


def resolve(pom: Path, name: str, properties: dict[str, str] | None = None,
            keep=lambda jar: True, timeout: float = 900.0) -> Path:
    """The folder of the jars ``pom`` depends on (runtime scope, transitively), resolving
    them on first use.  ``properties`` are passed to Maven as ``-Dkey=value`` (the pom's
    versions); ``keep(jar_name)`` says which of the copied jars stay in the folder."""
    target = resolved_dir(pom, name, properties)
    if (target / DONE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    failed = target.parent / f"{target.name}.failed"
    # one lock for the whole cache: one resolver at a time, the others then find their folder
    # done, and one Maven at a time writing to the local repository (~/.m2)
    with open(target.parent / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / DONE).is_file():
            return target
        _raise_recent_failure(failed)
        try:
            _resolve_into(target, pom, name, properties, keep, timeout)
        except MavenUnavailable as e:
            failed.write_text(str(e))
            raise
        failed.unlink(missing_ok=True)
    return target


def _raise_recent_failure(failed: Path) -> None:
    try:
        age = time.time() - failed.stat().st_mtime
    except OSError:
        return
    if 0 <= age < FAILED_TTL_S:
        raise MavenUnavailable(f"{failed.read_text(errors='replace')}\n(as resolved {age:.0f} s ago; "
                               f"{failed} holds it for {FAILED_TTL_S:.0f} s)")


def _resolve_into(target: Path, pom: Path, name: str, properties: dict[str, str] | None, keep,
                  timeout: float) -> None:
    """Run Maven into a scratch folder beside ``target`` and rename its jars into place."""
    mvn = maven_binary()
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        shutil.copyfile(pom, scratch / "pom.xml")
        jars = scratch / "jars"
        command = [mvn, "-B", "-q", "-f", str(scratch / "pom.xml"), "dependency:copy-dependencies",
                   f"-DoutputDirectory={jars}", "-DincludeScope=runtime",
                   *(f"-D{k}={v}" for k, v in sorted((properties or {}).items()))]
        log.info("resolving %s (%s) into %s", name, pom, target)
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  cwd=scratch, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise MavenUnavailable(f"mvn could not resolve {pom.name} ({name}): {e}") from e
        if done.returncode != 0 or not jars.is_dir():
            raise MavenUnavailable(f"mvn could not resolve {pom.name} ({name}): {_maven_errors(done.stdout)}")
        for jar in jars.iterdir():
            if not keep(jar.name):
                jar.unlink()
        seconds = time.monotonic() - started
        (jars / DONE).write_text(json.dumps({"pom": str(pom), "properties": properties or {},
                                             "jars": sorted(j.name for j in jars.glob("*.jar")),
                                             "seconds": round(seconds, 1)}, indent=1))
        os.rename(jars, target)
        log.info("resolved %s in %.1f s", name, seconds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _maven_errors(output: str) -> str:
    """Maven's [ERROR] lines (without its help links), else the end of its output."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output.splitlines()]
    errors = [line for line in lines if line.startswith("[ERROR]") and line.strip() != "[ERROR]"
              and not any(b in line for b in _BOILERPLATE)]
    return "\n".join(errors[:8]) if errors else "\n".join(lines[-20:])


def maven_binary(timeout: float = 600.0) -> str:
    """The path of ``mvn``, installing Debian's ``maven`` package first where it is missing and
    we are root with apt-get."""
    mvn = shutil.which("mvn")
    if mvn is not None:
        return mvn
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise MavenUnavailable("mvn is not on PATH (apt-get install maven)")
    with open(Path(tempfile.gettempdir()) / "spark-coord-apt-maven.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shutil.which("mvn") is None:
            log.info("installing Debian's maven package")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            try:
                for command in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "maven"]):
                    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                                          stdin=subprocess.DEVNULL)
                    if done.returncode != 0:
                        raise MavenUnavailable(f"{' '.join(command[:2])} failed: {done.stderr[-1000:]}")
            except (OSError, subprocess.TimeoutExpired) as e:
                raise MavenUnavailable(f"apt-get install maven failed: {e}") from e
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailable("apt-get installed maven but mvn is not on PATH")
    return mvn
