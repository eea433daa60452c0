-- break_nodes: one row per (run, break node): a node where the graph stopped being one
-- compiled program, over every source and position it broke at.
--
-- reads: breaks
--
-- run_id    VARCHAR  the run
-- node      VARCHAR  the break node's name ('nonzero_0')
-- op_type   VARCHAR  its op ('NonZero')
-- position  BIGINT   its first position in the sorted graph
-- reason    VARCHAR  what its value is needed for ('the shape of a Reshape'); any one of them
-- runs      BIGINT   times it ran (break spans)
SELECT run_id, node, op_type, min(position) AS position, any_value(reason) AS reason,
    CAST(sum(runs) AS BIGINT) AS runs
FROM breaks GROUP BY ALL
