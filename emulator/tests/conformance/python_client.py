#!/usr/bin/env python3
"""Cross-language check of the queue-aware emulator with Python's official client.

Run by the Rust test `cross_language::python_official_client_...` against a fresh database:

    SPANNER_EMULATOR_HOST=127.0.0.1:PORT python3 python_client.py \
        --project P --instance I --database D

It creates queues (UpdateDatabaseDdl), sends (Transaction.send / Batch.send, with and without
deliver_time, STRING and BYTES payloads, together with a table write), receives (a strong
single-use snapshot streaming RECEIVE_<Q>), renews (RENEWLEASE_<Q> with an array parameter) and
acks (Batch.ack, NotFound for a missing message, ignore_not_found). Every step checks its
result; the last line of stdout is a JSON summary. Exit status 0 means every check passed.
"""

import argparse
import base64
import datetime
import json
import sys


def fail(message):
    print(f"CHECK FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def receive(database, queue, max_duration, want):
    """Receives until `want` rows arrived or the stream ends; returns them as dicts."""
    rows = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            f"SELECT * FROM RECEIVE_{queue}(max_duration => '{max_duration}')"
        )
        for row in results:
            names = [field.name for field in results.fields]
            rows.append(dict(zip(names, row)))
            if len(rows) >= want:
                break
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--database", required=True)
    args = parser.parse_args()

    from google.api_core import exceptions
    from google.cloud import spanner
    from google.cloud.spanner_v1 import param_types

    client = spanner.Client(project=args.project)
    database = client.instance(args.instance).database(args.database)

    # Create queues.
    operation = database.update_ddl(
        [
            "CREATE QUEUE PyTasks (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) "
            "PRIMARY KEY (Id)",
            "CREATE QUEUE PyBlobs (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL, ) "
            "PRIMARY KEY (Id), OPTIONS (receive_mode = 'PULL')",
        ]
    )
    operation.result(120)
    database.reload()
    ddl = database.ddl_statements
    check(
        any(s.startswith("CREATE QUEUE PyTasks") for s in ddl),
        f"GetDatabaseDdl lacks the queue: {ddl}",
    )
    check(not any("DeliverTime" in s for s in ddl), f"internal column shown: {ddl}")

    # Send: in a read-write transaction with a table write, and in a batch.
    def send_with_order(transaction):
        transaction.insert("Orders", columns=("Id", "Note"), values=[(1, "from python")])
        transaction.send("PyTasks", [1], "hello from python")

    database.run_in_transaction(send_with_order)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    with database.batch() as batch:
        batch.send("PyTasks", [2], "due in an hour", deliver_time=later)
        # BYTES payloads are base64 text for this client.
        batch.send("PyBlobs", [1], base64.b64encode(b"\x00\x01binary").decode())

    # A second send of a queued key fails.
    try:
        with database.batch() as batch:
            batch.send("PyTasks", [1], "duplicate")
        fail("a second send of a queued key succeeded")
    except exceptions.AlreadyExists:
        pass

    # Receive.
    got = receive(database, "PyTasks", "10s", 1)
    check(len(got) == 1, f"expected one due message, got {got}")
    message = got[0]
    check(message["Id"] == 1, f"wrong message: {message}")
    check(message["Payload"] == "hello from python", f"wrong payload: {message}")
    check(message["SpannerLeaseToken"], f"no lease token: {message}")
    check(message["SpannerLastBatchMessage"] is True, f"last-batch flag: {message}")
    token = message["SpannerLeaseToken"]
    blob = receive(database, "PyBlobs", "10s", 1)
    # This client returns BYTES values as base64 text (bytes), as for any BYTES column.
    check(
        len(blob) == 1 and base64.b64decode(blob[0]["Payload"]) == b"\x00\x01binary",
        f"BYTES payload: {blob}",
    )

    # Renew, with an array parameter.
    with database.snapshot() as snapshot:
        renewed = list(
            snapshot.execute_sql(
                "SELECT * FROM RENEWLEASE_PyTasks(lease_tokens => @tokens)",
                params={"tokens": [token, "not-a-token"]},
                param_types={"tokens": param_types.Array(param_types.STRING)},
            )
        )
    check(len(renewed) == 1, f"one renewal row expected: {renewed}")
    old, new, expires = renewed[0]
    check(old == token and new and new != token, f"token rotation: {renewed}")
    remaining = (expires - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    check(5 <= remaining <= 15, f"lease not about 10 s from now: {remaining}")

    # Ack.
    with database.batch() as batch:
        batch.ack("PyTasks", [1])
        batch.ack("PyBlobs", [1])
    try:
        with database.batch() as batch:
            batch.ack("PyTasks", [1])
        fail("an ack of a missing message succeeded")
    except exceptions.NotFound as error:
        check("Message not found" in str(error), f"NotFound message: {error}")
    with database.batch() as batch:
        batch.ack("PyTasks", [1], ignore_not_found=True)
    # Renewing the token of the acked message: no new token.
    with database.snapshot() as snapshot:
        renewed = list(
            snapshot.execute_sql(
                "SELECT * FROM RENEWLEASE_PyTasks(lease_tokens => @tokens)",
                params={"tokens": [new]},
                param_types={"tokens": param_types.Array(param_types.STRING)},
            )
        )
    check(len(renewed) == 1 and renewed[0][1] is None, f"acked token renewal: {renewed}")

    with database.snapshot() as snapshot:
        left = [row[0] for row in snapshot.execute_sql("SELECT Id FROM PyTasks ORDER BY Id")]
    check(left == [2], f"only the scheduled message should remain: {left}")

    print(
        json.dumps(
            {
                "ok": True,
                "received": [message["Id"]],
                "renewed": True,
                "remaining": left,
                "client": spanner.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
