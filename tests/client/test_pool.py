"""Clients kept between uses per settings (``client.pool``): the same connections for the next
lease, a client of its own for a concurrent lease, closed after a failure or when idle."""

from __future__ import annotations

import pytest
from helpers import wait_until

from spark_coord.client.pool import ClientPool


@pytest.fixture
def bootstrap(broker_factory):
    host, port = broker_factory(0).address
    return f"{host}:{port}"


def test_the_next_lease_gets_the_same_connections(bootstrap):
    pool = ClientPool()
    try:
        with pool.lease(bootstrap, "c", 5.0) as first:
            conn = first.cluster.any_connection()
            first.state["mine"] = 1
        with pool.lease(bootstrap, "c", 5.0) as again:
            assert again.cluster is first.cluster and again.cluster.any_connection() is conn and not conn.closed
            assert again.state["mine"] == 1 and again.reused
        with pool.lease(bootstrap, "other-client-id", 5.0) as other:
            assert other.cluster is not first.cluster  # other settings, another client
        assert (pool.created, pool.reused) == (2, 1)
    finally:
        pool.close_all()
    assert conn.closed


def test_a_concurrent_lease_gets_a_client_of_its_own_and_failures_close(bootstrap):
    pool = ClientPool()
    try:
        with pool.lease(bootstrap, "c", 5.0) as a, pool.lease(bootstrap, "c", 5.0) as b:
            assert a.cluster is not b.cluster
        assert pool.idle_count() == 2
        with pytest.raises(RuntimeError):
            with pool.lease(bootstrap, "c", 5.0) as failing:
                conn = failing.cluster.any_connection()
                raise RuntimeError("a task failed")
        assert conn.closed and pool.idle_count() == 1
        with pool.lease(bootstrap, "c", 5.0) as dropped:
            dropped.discard()
        assert pool.idle_count() == 0
    finally:
        pool.close_all()


def test_idle_clients_are_closed_and_zero_keeps_nothing(bootstrap):
    pool = ClientPool(sweep_s=0.05)
    try:
        with pool.lease(bootstrap, "c", 5.0, idle_ms=0) as none:
            conn = none.cluster.any_connection()
        assert conn.closed and pool.idle_count() == 0
        with pool.lease(bootstrap, "c", 5.0, idle_ms=200) as brief:
            conn = brief.cluster.any_connection()
        assert pool.idle_count() == 1
        wait_until(lambda: conn.closed and pool.idle_count() == 0, timeout=10, message="the idle client closed")
    finally:
        pool.close_all()
