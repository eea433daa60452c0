-- compile_sizes: one row per (run, source, position, argument, dimension): its size at each
-- compile there, in compile order (the sequence a recompile finding quotes).
--
-- reads: compiles
--
-- run_id    VARCHAR   the run
-- source    VARCHAR   the model source (its path or Hub address)
-- position  BIGINT    the segment position (index in the sorted graph)
-- arg       VARCHAR   the segment argument's name ('input_ids')
-- dim       BIGINT    the dimension of that argument (0-based)
-- sizes     BIGINT[]  the dimension's size at compile 1, 2, 3...
SELECT c.run_id, c.source, c.position, a.arg.name AS arg, d.i - 1 AS dim,
    list(a.arg.shape[d.i] ORDER BY c.compile_index) AS sizes
FROM compiles c, unnest(c.shapes) AS a(arg), range(1, len(a.arg.shape) + 1) AS d(i)
WHERE c.position IS NOT NULL
GROUP BY ALL
