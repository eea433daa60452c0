import streamlit as st

st.title("recompiles (coming)")
