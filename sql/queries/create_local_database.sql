-- The database `make run` uses on the local embedded server.
CREATE DATABASE skiplock
