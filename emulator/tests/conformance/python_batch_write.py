#!/usr/bin/env python3
"""Batch writes (mutation groups) through Python's official client.

Run by the Rust test `cross_language::python_official_client_batch_write_*` against a fresh
database holding a table and a queue (GoogleSQL `Orders (Id, Note)` and `Q (Id, Payload)`, or
their PostgreSQL twins `orders (id, note)` and `q (id, payload)`), where message 1 is queued:

    SPANNER_EMULATOR_HOST=127.0.0.1:PORT python3 python_batch_write.py \
        --project P --instance I --database D --dialect googlesql|postgresql

It sends one `database.mutation_groups()` ... `.batch_write()` with groups that commit (a table
write with a send, an ack with a table write, plain table writes) and groups that fail alone (a
duplicate insert, an ack of a missing message), and checks each group's status by index. The
last line of stdout is a JSON summary; exit status 0 means every check passed.
"""

import argparse
import json
import sys

OK, NOT_FOUND, ALREADY_EXISTS = 0, 5, 6


def fail(message):
    print(f"CHECK FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--dialect", choices=["googlesql", "postgresql"], required=True)
    args = parser.parse_args()

    from google.cloud import spanner

    if args.dialect == "googlesql":
        table, columns, queue = "Orders", ("Id", "Note"), "Q"
    else:
        table, columns, queue = "orders", ("id", "note"), "q"

    client = spanner.Client(project=args.project)
    database = client.instance(args.instance).database(args.database)

    with database.mutation_groups() as groups:
        # 0: a table write and a send, atomically.
        g = groups.group()
        g.insert(table, columns=columns, values=[(10, "py ten")])
        g.send(queue, [10], "from python")
        # 1: an ack of the message queued before, with a table write.
        g = groups.group()
        g.ack(queue, [1])
        g.insert(table, columns=columns, values=[(11, "py eleven")])
        # 2: a send with a duplicate insert: fails whole (ALREADY_EXISTS).
        g = groups.group()
        g.send(queue, [12], "never sent")
        g.insert(table, columns=columns, values=[(10, "duplicate")])
        # 3: an ack of a message that does not exist (NOT_FOUND).
        g = groups.group()
        g.ack(queue, [99])
        # 4: plain table writes only.
        g = groups.group()
        g.insert_or_update(table, columns=columns, values=[(13, "plain")])
        statuses = {}
        for response in groups.batch_write():
            for index in response.indexes:
                check(index not in statuses, f"group {index} reported twice")
                statuses[index] = (
                    response.status.code,
                    response.status.message,
                    response.commit_timestamp is not None
                    and response.status.code == OK,
                )

    check(sorted(statuses) == [0, 1, 2, 3, 4], f"every group reported once: {statuses}")
    for index in (0, 1, 4):
        code, message, stamped = statuses[index]
        check(code == OK, f"group {index} should commit: {statuses[index]}")
        check(stamped, f"group {index} has no commit timestamp")
    check(statuses[2][0] == ALREADY_EXISTS, f"duplicate insert: {statuses[2]}")
    check(statuses[3][0] == NOT_FOUND, f"missing message: {statuses[3]}")
    check("Message not found" in statuses[3][1], f"missing message text: {statuses[3]}")

    with database.snapshot() as snapshot:
        rows = list(
            snapshot.execute_sql(f"SELECT {columns[0]} FROM {table} ORDER BY {columns[0]}")
        )
    check([r[0] for r in rows] == [10, 11, 13], f"table rows: {rows}")
    with database.snapshot() as snapshot:
        queued = list(
            snapshot.execute_sql(f"SELECT {columns[0]} FROM {queue} ORDER BY {columns[0]}")
        )
    check([r[0] for r in queued] == [10], f"queued messages: {queued}")

    print(
        json.dumps(
            {
                "ok": True,
                "dialect": args.dialect,
                "statuses": {i: s[0] for i, s in sorted(statuses.items())},
            }
        )
    )


if __name__ == "__main__":
    main()
