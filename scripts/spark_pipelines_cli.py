"""pyspark's ``spark-pipelines`` command line (``pyspark.pipelines.cli``), as
``./spark-pipelines.sh`` runs it, with one addition: a pipeline spec's ``storage`` may be
a relative path, taken under the state directory the script passes in
``SPARK_PIPELINES_STATE`` (a path without a scheme becomes a ``file:`` URI); and one
repair: every Spark setting of the command line reaches the pipeline's Spark.

Spark wants the storage root, where the pipeline keeps its streaming checkpoints, as an
absolute URI; a spec kept in a repository cannot name one for every machine it runs on.
Everything else -- the commands, their options, the spec's other fields -- is pyspark's.

The repair: spark-submit hands the settings to the local Connect server a pipeline runs on
in environment variables of ten settings each (``PYSPARK_REMOTE_INIT_CONF_0``, ``_1``, ...),
and pyspark 4.3 reads them in a loop that keeps only the last one, so with more than ten
settings (spark-submit adds six of its own) some are silently lost -- the catalog and
warehouse settings of ./spark-pipelines.sh among them. ``merge_init_conf`` joins them into
one before the session starts.

And one more: the local Connect server a run starts listens on a port of its own, not on Spark's
fixed 15002, so two pipelines run side by side on one machine, and beside a Spark Connect
server (``./spark-connect.sh``). ./spark-pipelines.sh asks for an ephemeral port
(``spark.connect.grpc.binding.port=0``) when no ``--remote`` is given, and
``local_server_port`` tells pyspark's client which port the in-process server took (pyspark
does the same for its own tests, under ``SPARK_TESTING``).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

from pyspark.pipelines import cli
from pyspark.sql.connect.client.core import DefaultChannelBuilder

_load_pipeline_spec = cli.load_pipeline_spec


def storage_uri(storage: str, state: str | None) -> str:
    """``storage`` as Spark wants it: URIs unchanged, paths as ``file:`` URIs, a relative
    path under ``state`` (or under the current directory without one)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", storage):
        return storage
    return (Path(state or ".") / storage).resolve().as_uri()


def merge_init_conf(environ=os.environ) -> None:
    """Join ``PYSPARK_REMOTE_INIT_CONF_<i>`` (i below ``PYSPARK_REMOTE_INIT_CONF_LEN``) into one."""
    count = int(environ.get("PYSPARK_REMOTE_INIT_CONF_LEN", "0"))
    if count <= 1:
        return
    merged: dict = {}
    for i in range(count):
        merged.update(json.loads(environ.pop(f"PYSPARK_REMOTE_INIT_CONF_{i}")))
    environ["PYSPARK_REMOTE_INIT_CONF_0"] = json.dumps(merged)
    environ["PYSPARK_REMOTE_INIT_CONF_LEN"] = "1"


def load_pipeline_spec(spec_path: Path) -> cli.PipelineSpec:
    spec = _load_pipeline_spec(spec_path)
    # PipelineSpec is frozen, and a replace() would validate its normalised globs again
    object.__setattr__(spec, "storage", storage_uri(spec.storage, os.environ.get("SPARK_PIPELINES_STATE")))
    return spec


cli.load_pipeline_spec = load_pipeline_spec


def local_server_port() -> int:
    """The port of the Connect server this process started (``--remote`` unset), else Spark's 15002."""
    from pyspark.sql.session import SparkSession

    session = SparkSession._instantiatedSession
    if session is not None:
        service = getattr(session._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
        port = getattr(service, "MODULE$").localPort()
        if port > 0:
            return port
    return _default_port()


_default_port = DefaultChannelBuilder.default_port
DefaultChannelBuilder.default_port = staticmethod(local_server_port)

# The session repeats every setting of the command line once the server runs, and warns that the
# static ones cannot change: these were applied when the local server started (or, on a server
# named with --remote, are that server's to decide).
warnings.filterwarnings("ignore", r"Failed to set spark\.sql\.(warehouse\.dir|catalogImplementation) ", UserWarning)

if __name__ == "__main__":
    merge_init_conf()
    cli.main()
