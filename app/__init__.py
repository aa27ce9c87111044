"""The what-if planner: a Streamlit front end over the same scenarios, simulator and reports as the CLI."""
