from pinchpoint.cli.main import entry

entry()
