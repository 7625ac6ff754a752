"""HEAP's criteria, readers and comparisons: the package `t5_tasks.heap`, under the name its users
(scripts, runner, gin comments) import it by."""
# pylint: disable=wildcard-import,unused-wildcard-import
from t5_tasks.heap import *
