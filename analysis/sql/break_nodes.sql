-- break_nodes: one row per (run, break node): a node where the graph stopped being one
-- compiled program, over every source and position it broke at.
--
-- run_id
-- node, op_type  the break node ('nonzero_0', 'NonZero')
-- position       its first position in the sorted graph
-- reason         what its value is needed for ('the shape of a Reshape'); any one of them
-- runs           times it ran (break spans)
SELECT run_id, node, op_type, min(position) AS position, any_value(reason) AS reason,
    CAST(sum(runs) AS BIGINT) AS runs
FROM breaks GROUP BY ALL
