#!/usr/bin/env python3
"""Cross-language check of the queue-aware emulator with Python's official client, on a
PostgreSQL-dialect database.

Run by the Rust test `cross_language::python_official_client_on_a_postgresql_database` against a
fresh PostgreSQL-dialect database that has the table `orders (id bigint, note text)`:

    SPANNER_EMULATOR_HOST=127.0.0.1:PORT python3 python_client_pg.py \
        --project P --instance I --database D

It creates queues in PostgreSQL syntax (UpdateDatabaseDdl), sends (Transaction.send / Batch.send
with and without deliver_time, text and bytea payloads, together with a table write; a DML
send scheduled with `now() + interval '5 minutes'`, then cancelled), receives
(`spanner.receive_<q>(max_batch_size, priority, max_duration)`), renews
(`spanner.renewlease_<q>(lease_tokens => $1)`) and acks (Batch.ack, and DML `DELETE …
ASSERT_ROWS_MODIFIED 1` with `$1`). Every step checks its result; the last line of stdout is a
JSON summary. Exit status 0 means every check passed.
"""

import argparse
import base64
import datetime
import json

# The GoogleSQL script beside this one; its directory is on the path when this file runs.
from python_client import check, fail


def receive(database, queue, want):
    """Receives one batch of at most `want` rows; returns them as dicts."""
    rows = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            f"SELECT * FROM spanner.receive_{queue}({want}, NULL, '10s')"
        )
        for row in results:
            names = [field.name for field in results.fields]
            rows.append(dict(zip(names, row)))
            # Stop at the batch's end: waiting out the stream would let the leases expire.
            if len(rows) >= want or rows[-1]["spanner_last_batch_message"]:
                break
    return rows


def renew(database, queue, tokens):
    from google.cloud.spanner_v1 import param_types

    with database.snapshot() as snapshot:
        return list(
            snapshot.execute_sql(
                f"SELECT * FROM spanner.renewlease_{queue}(lease_tokens => $1)",
                params={"p1": tokens},
                param_types={"p1": param_types.Array(param_types.STRING)},
            )
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--database", required=True)
    args = parser.parse_args()

    from google.api_core import exceptions
    from google.cloud import spanner
    from google.cloud.spanner_admin_database_v1.types import DatabaseDialect
    from google.cloud.spanner_v1 import param_types

    client = spanner.Client(project=args.project)
    database = client.instance(args.instance).database(args.database)
    database.reload()
    api = client.database_admin_api
    check(
        database.database_dialect == DatabaseDialect.POSTGRESQL,
        f"not a PostgreSQL database: {database.database_dialect}",
    )

    # Create queues in PostgreSQL syntax.
    operation = database.update_ddl(
        [
            "CREATE QUEUE pytasks (id bigint NOT NULL, payload text NOT NULL, "
            "PRIMARY KEY (id))",
            "CREATE QUEUE pyblobs (id bigint NOT NULL, payload bytea NOT NULL, "
            "PRIMARY KEY (id))",
        ]
    )
    operation.result(120)
    database.reload()
    ddl = database.ddl_statements
    check(
        any(s.startswith("CREATE QUEUE pytasks") for s in ddl),
        f"GetDatabaseDdl lacks the queue: {ddl}",
    )
    check(not any("deliver_time" in s for s in ddl), f"internal column shown: {ddl}")

    # Send: in a read-write transaction with a table write, and in a batch.
    def send_with_order(transaction):
        transaction.insert("orders", columns=("id", "note"), values=[(1, "from python")])
        transaction.send("pytasks", [1], "hello from python")

    database.run_in_transaction(send_with_order)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    with database.batch() as batch:
        batch.send("pytasks", [2], "due in an hour", deliver_time=later)
        batch.send("pytasks", [3], "acked by dml")
        # bytea payloads are base64 text for this client.
        batch.send("pyblobs", [1], base64.b64encode(b"\x00\x01binary").decode())

    # A DML send scheduled with interval arithmetic, as PostgreSQL users write it: stored five
    # minutes after the statement's now().
    def send_in_five_minutes(transaction):
        return list(
            transaction.execute_sql(
                "INSERT INTO pytasks (id, payload, deliver_time) "
                "VALUES ($1, $2, now() + interval '5 minutes') RETURNING deliver_time, now()",
                params={"p1": 4, "p2": "in five minutes"},
                param_types={"p1": param_types.INT64, "p2": param_types.STRING},
            )
        )

    scheduled = database.run_in_transaction(send_in_five_minutes)
    check(
        len(scheduled) == 1
        and scheduled[0][0] - scheduled[0][1] == datetime.timedelta(minutes=5),
        f"deliver_time should be now() + 5 minutes: {scheduled}",
    )

    # A second send of a queued key fails.
    try:
        with database.batch() as batch:
            batch.send("pytasks", [1], "duplicate")
        fail("a second send of a queued key succeeded")
    except exceptions.AlreadyExists:
        pass

    # Receive: the two due messages, not the scheduled one.
    got = sorted(receive(database, "pytasks", 10), key=lambda m: m["id"])
    check([m["id"] for m in got] == [1, 3], f"expected the due messages 1 and 3, got {got}")
    # Cancel the message scheduled with an interval (not received above: it is not due).
    def cancel(transaction):
        return transaction.execute_update(
            "DELETE FROM pytasks WHERE id = $1",
            params={"p1": 4},
            param_types={"p1": param_types.INT64},
        )

    check(database.run_in_transaction(cancel) == 1, "cancelling the scheduled message")
    message = got[0]
    check(message["payload"] == "hello from python", f"wrong payload: {message}")
    check(message["spanner_lease_token"], f"no lease token: {message}")
    check(
        sum(1 for m in got if m["spanner_last_batch_message"]) == 1,
        f"one last-in-batch flag expected: {got}",
    )
    token = message["spanner_lease_token"]
    blob = receive(database, "pyblobs", 1)
    check(
        len(blob) == 1 and base64.b64decode(blob[0]["payload"]) == b"\x00\x01binary",
        f"bytea payload: {blob}",
    )

    # Renew, with an array parameter.
    renewed = renew(database, "pytasks", [token, "not-a-token"])
    check(len(renewed) == 1, f"one renewal row expected: {renewed}")
    old, new, expires = renewed[0]
    check(old == token and new and new != token, f"token rotation: {renewed}")
    remaining = (expires - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    check(5 <= remaining <= 15, f"lease not about 10 s from now: {remaining}")

    # Ack by mutation, and by DML with the business write in the same transaction.
    with database.batch() as batch:
        batch.ack("pytasks", [1])
        batch.ack("pyblobs", [1])

    def ack_by_dml(transaction, note):
        transaction.execute_update(
            "UPDATE orders SET note = $2 WHERE id = $1",
            params={"p1": 1, "p2": note},
            param_types={"p1": param_types.INT64, "p2": param_types.STRING},
        )
        return transaction.execute_update(
            "DELETE FROM pytasks WHERE id = $1 ASSERT_ROWS_MODIFIED 1",
            params={"p1": 3},
            param_types={"p1": param_types.INT64},
        )

    check(database.run_in_transaction(ack_by_dml, "done") == 1, "the DML ack deleted no row")
    try:
        with database.batch() as batch:
            batch.ack("pytasks", [1])
        fail("an ack of a missing message succeeded")
    except exceptions.NotFound:
        pass
    # A second DML ack fails and takes its transaction's write with it.
    try:
        database.run_in_transaction(ack_by_dml, "acked twice")
        fail("a DML ack of a missing message succeeded")
    except exceptions.OutOfRange:
        pass
    # The acked message's token renews to nothing.
    renewed = renew(database, "pytasks", [new])
    check(len(renewed) == 1 and renewed[0][1] is None, f"acked token renewal: {renewed}")

    with database.snapshot() as snapshot:
        left = [row[0] for row in snapshot.execute_sql("SELECT id FROM pytasks ORDER BY id")]
    with database.snapshot() as snapshot:
        notes = [row[0] for row in snapshot.execute_sql("SELECT note FROM orders")]
    check(left == [2], f"only the scheduled message should remain: {left}")
    check(notes == ["done"], f"the business write: {notes}")

    print(
        json.dumps(
            {
                "ok": True,
                "received": [m["id"] for m in got],
                "renewed": True,
                "remaining": left,
                "client": spanner.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
