SELECT * FROM PREDICT(MODEL sum3, (SELECT id, c AS a, b, a AS c FROM t), features = (c, b, a), on_null = 'skip', batch_size = 2)
