# P1 orion: not implemented yet (see the open issue).
