SELECT p.id, p.y AS old, q.y AS new FROM PREDICT(MODEL m1, TABLE t, on_null = 'skip') AS p JOIN PREDICT(MODEL m2, TABLE t) AS q USING (id) ORDER BY id
