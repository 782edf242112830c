"""pytest-timeout (the test extra) is loaded and gives every test a limit, so a hang fails."""


def test_a_hanging_test_fails(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert 0 < float(pytestconfig.getini("timeout")) <= 600
