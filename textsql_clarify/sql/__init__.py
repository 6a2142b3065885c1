"""The SQL execution layer: everything between an SQL string and the rows it returns.

* :mod:`.sandbox`: the read-only SQLite sandbox (:class:`~.sandbox.SQLiteSandbox`, :func:`~.sandbox.get_sandbox`,
  :class:`~.sandbox.ExecutionResult`), the one place agent and gold SQL execute.
* :mod:`.guards`: the limits it enforces (time, rows, value bytes, recursion) and the guarded SQL functions.
* :mod:`.watchdog`: the thread that interrupts a statement past its deadline.
* :mod:`.isolated`: the optional process-isolated executor (``isolation="process"``): worker processes with
  memory and CPU limits, killed and replaced at the deadline (:class:`~.isolated.ProcessSandbox`,
  :func:`~.isolated.make_sandbox`).
* :mod:`.schema`: the sqlglot boundary: parsing with size caps, qualification, the schema read from a database.
* :mod:`.uri`: :func:`~.uri.ro_uri`, the read-only ``file:`` URI every open uses (``immutable=1`` for a WAL file).

Nothing here imports the env, the rewards or the simulators (README "Design rules": data flows one way).
"""
