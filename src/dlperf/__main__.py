from dlperf.cli import app

app(prog_name="dlperf")
