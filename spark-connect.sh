#!/usr/bin/env bash
# Run a Spark Connect server with the project's environment, so clients connecting to
# sc://HOST:PORT can use format("coordkafka"): the same set-up as ./spark-submit.sh (.venv
# created on first use, Spark's Python workers run .venv's Python, this checkout on
# PYTHONPATH where Spark's data-source lookup finds pyspark_coordkafka, conf/spark-defaults.conf)
# with pyspark's Connect server (org.apache.spark.sql.connect.service.SparkConnectServer,
# in pyspark's own jars since 4.0).
#
#   ./spark-connect.sh start [--port 15002] [--host 127.0.0.1] [--timeout 180] [-- SPARK-SUBMIT OPTIONS]
#   ./spark-connect.sh status [--port 15002]
#   ./spark-connect.sh stop [--port 15002] [--timeout 60]
#   ./spark-connect.sh run [--port 15002] [--host 127.0.0.1] [-- SPARK-SUBMIT OPTIONS]   # in the foreground
#
# start returns once the server accepts connections (or fails with the end of its log);
# one server per port. Its pid file and log are tmp/spark-connect/connect-PORT.{pid,log}
# in this checkout, the tables its clients save go to warehouse/ beside them (--dir DIR or
# SPARK_CONNECT_DIR to put them elsewhere). The server
# binds 127.0.0.1 unless --host says otherwise: a Connect server runs whatever its clients
# send, so before binding another address set a token (--conf spark.connect.authenticate.token=...)
# that clients pass as sc://HOST:PORT/;token=...  (docs/spark/connect.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
server_class=org.apache.spark.sql.connect.service.SparkConnectServer

usage() { sed -n 's/^#   \(\.\/spark-connect\.sh\)/\1/p' "${BASH_SOURCE[0]}" >&2; exit 2; }

[ $# -ge 1 ] || usage
action=$1
shift
port=15002 host=127.0.0.1 timeout= dir=${SPARK_CONNECT_DIR:-$root/tmp/spark-connect}
while [ $# -gt 0 ]; do
  case $1 in
    --port) port=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "spark-connect.sh: unknown argument $1 (Spark's options go after --)" >&2; exit 2 ;;
  esac
done
case $port in ''|*[!0-9]*) echo "spark-connect.sh: --port must be a number, not '$port'" >&2; exit 2 ;; esac

pidfile="$dir/connect-$port.pid"
logfile="$dir/connect-$port.log"
client_host=$host
[ "$host" = 0.0.0.0 ] && client_host=127.0.0.1

# the pid of this port's server, when it is running (a stale pid file names no Connect server)
server_pid() {
  local pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && ps -ww -p "$pid" -o args= 2>/dev/null | grep -q "$server_class" && echo "$pid"
}

# alive and not a zombie (an orphan's parent may be slow to reap it)
running() { local s; s=$(ps -p "$1" -o stat= 2>/dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }

accepts() { (exec 3<>"/dev/tcp/$client_host/$port") 2>/dev/null; }

spark_env() {
  "$root/scripts/ensure-venv.sh"
  mkdir -p "$dir"
  local warehouse
  warehouse="$(cd "$dir" && pwd)/warehouse"
  local py="$root/.venv/bin/python"
  export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
  export PYSPARK_DRIVER_PYTHON="$py"
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
  command=("$root/.venv/bin/spark-submit" --properties-file "$root/conf/spark-defaults.conf"
           --class "$server_class" --name "Spark Connect server"
           --conf "spark.connect.grpc.binding.address=$host" --conf "spark.connect.grpc.binding.port=$port"
           --conf spark.connect.grpc.port.maxRetries=0 --conf "spark.sql.warehouse.dir=$warehouse" "$@")
}

case $action in
  run)
    spark_env "$@"
    exec "${command[@]}"
    ;;
  start)
    if pid=$(server_pid); then
      echo "spark-connect.sh: a server is already running on port $port (pid $pid); stop it first" >&2
      exit 1
    fi
    if accepts; then
      echo "spark-connect.sh: port $port is taken by another process" >&2
      exit 1
    fi
    spark_env "$@"
    : > "$logfile"
    # its own session: a Ctrl-C in this shell does not reach the server
    setsid nohup "${command[@]}" >> "$logfile" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$pidfile"
    deadline=$((SECONDS + ${timeout:-180}))
    until accepts; do
      if ! running "$pid"; then
        rm -f "$pidfile"
        echo "spark-connect.sh: the server exited while starting; the end of $logfile:" >&2
        tail -n 30 "$logfile" >&2
        exit 1
      fi
      if [ $SECONDS -ge $deadline ]; then
        echo "spark-connect.sh: the server does not accept connections on $client_host:$port after ${timeout:-180} s (pid $pid, log $logfile)" >&2
        exit 1
      fi
      sleep 0.5
    done
    echo "Spark Connect server running: sc://$client_host:$port (pid $pid, log $logfile)"
    ;;
  status)
    if pid=$(server_pid); then
      if accepts; then
        echo "Spark Connect server running: sc://$client_host:$port (pid $pid)"
        exit 0
      fi
      echo "Spark Connect server starting on port $port (pid $pid)"
      exit 0
    fi
    if [ -f "$pidfile" ]; then
      echo "no Spark Connect server on port $port (stale pid file $pidfile)"
      exit 1
    fi
    echo "no Spark Connect server on port $port"
    exit 3
    ;;
  stop)
    if ! pid=$(server_pid); then
      rm -f "$pidfile"
      echo "no Spark Connect server on port $port"
      exit 0
    fi
    kill -TERM "$pid"
    deadline=$((SECONDS + ${timeout:-60}))
    while running "$pid"; do
      if [ $SECONDS -ge $deadline ]; then
        echo "spark-connect.sh: the server (pid $pid) did not stop within ${timeout:-60} s of SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
    rm -f "$pidfile"
    echo "Spark Connect server on port $port stopped"
    ;;
  *) usage ;;
esac
