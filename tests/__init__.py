import os

# The suite's settings are its own: a team's .env in the project folder (a stage list, a
# database) and its shell's stage and plug-in choices reach neither the tests nor the
# commands they start.
os.environ["SKIPLOCK_ENV_FILE"] = ""
for _name in ("PIPELINE_STAGES", "PIPELINE_PLUGINS"):
    os.environ.pop(_name, None)
