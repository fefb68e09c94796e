import os

# The suite's settings are its own: a team's .env in the project folder (a stage list, a
# database) and its shell's stage and plug-in choices reach neither the tests nor the
# commands they start. The queue's tests run without any plug-in; tests/outreach, the
# example plug-in's own, names it (tests/outreach/conftest.py) and runs as a session of its
# own (tests/conftest.py leaves it out of any other).
os.environ["SKIPLOCK_ENV_FILE"] = ""
os.environ.pop("PIPELINE_STAGES", None)
os.environ["PIPELINE_PLUGINS"] = ""
