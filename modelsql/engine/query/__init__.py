"""The PREDICT planner: binding a statement with PREDICTs into a logical plan, the rewrite rules, the
cost function, physical lowering to operators and the SQL DuckDB runs, EXPLAIN, and the query handler."""
