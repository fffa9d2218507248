# P14 neural_fdm: not implemented yet (see the open issue).
