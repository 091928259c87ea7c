SELECT a.id, a.y AS champion, b.y AS challenger
FROM PREDICT(PIPELINE p1, TABLE t) AS a JOIN PREDICT(PIPELINE p2, TABLE t) AS b ON a.id = b.id
