# P11 sharpening: not implemented yet (see the open issue).
