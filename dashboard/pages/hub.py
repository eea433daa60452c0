import streamlit as st

st.title("hub (coming)")
