SELECT a.y AS one, b.y AS two, c.y AS three
FROM PREDICT(PIPELINE p1, TABLE t) AS a
JOIN PREDICT(PIPELINE p2, TABLE t) AS b ON a.id = b.id
JOIN PREDICT(PIPELINE p3, TABLE t) AS c ON a.id = c.id
