import keras
import pytest

from stagegan.core.variables import check_partition, count_parameters, select_variables
from stagegan.errors import ConfigError


def dense_model(scope, units=2, use_name_scope=True):
    def build():
        x = keras.Input((3,))
        h = keras.layers.Dense(units, name="hidden")(x)
        return keras.Model(x, keras.layers.Dense(1, name="out")(h))

    if use_name_scope:
        with keras.name_scope(scope):
            return build()
    return build()


@pytest.fixture(scope="module")
def networks():
    return {"generator": dense_model("generator"), "discriminator": dense_model("discriminator")}


def test_partition_orders_all_variables(networks):
    variables = check_partition(networks)
    assert [v.path for v in variables] == [
        "generator/hidden/kernel",
        "generator/hidden/bias",
        "generator/out/kernel",
        "generator/out/bias",
        "discriminator/hidden/kernel",
        "discriminator/hidden/bias",
        "discriminator/out/kernel",
        "discriminator/out/bias",
    ]


def test_partition_rejects_unscoped_and_shared_variables(networks):
    with pytest.raises(ConfigError, match="outside their network's scope"):
        check_partition({"generator": dense_model("x", use_name_scope=False)})
    with pytest.raises(ConfigError, match="belong to two networks"):
        check_partition({"generator": networks["generator"], "critic": networks["generator"]})


def test_select_by_glob_keeps_model_order(networks):
    variables = check_partition(networks)
    chosen = select_variables(["*/out/*", "generator/*"], variables, "k")
    assert [v.path for v in chosen] == [
        "generator/hidden/kernel",
        "generator/hidden/bias",
        "generator/out/kernel",
        "generator/out/bias",
        "discriminator/out/kernel",
        "discriminator/out/bias",
    ]
    assert count_parameters(chosen[:2]) == 3 * 2 + 2


def test_pattern_matching_nothing_names_key_and_scopes(networks):
    variables = check_partition(networks)
    with pytest.raises(ConfigError) as info:
        select_variables(["disc/*"], variables, "stages[1].updates[0].train")
    assert info.value.key == "stages[1].updates[0].train"
    assert "'disc/*' matches no variable (known scopes: discriminator/, generator/)" in str(
        info.value
    )
