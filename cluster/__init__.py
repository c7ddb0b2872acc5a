"""Running a whole deployment: `starmesh up`, its processes, checkpoints and trace store."""
