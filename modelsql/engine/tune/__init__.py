"""TUNE and its studies: binding the statement, its data and checks, the round plans cut into stage
trees (Hippo) and their run; SHOW STUDIES, DESCRIBE STUDY, DROP STUDY."""
