# P16 hip: not implemented yet (see the open issue).
