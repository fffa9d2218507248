# P5 deepgate4: not implemented yet (see the open issue).
