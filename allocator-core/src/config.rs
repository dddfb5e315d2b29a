//! placeholder until the config helper lands
