"""The agent runtime: tools, tool-call parsing, chat rendering, trajectories and the agent loop."""
