SELECT id, y FROM PREDICT(MODELS (m1, m2) ROUTE BY tag, TABLE t, merge = 'never')
