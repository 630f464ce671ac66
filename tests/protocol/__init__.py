"""Tests of the wire codecs (haqueue/protocol): beanstalkd, gearman and the id service's JSON."""
